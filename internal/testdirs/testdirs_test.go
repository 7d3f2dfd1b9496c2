package testdirs

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSearchable(t *testing.T) {
	tmp, err := os.Stat(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	top := t.TempDir()
	deep := filepath.Join(top, "a", "b")
	if err := os.MkdirAll(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(top, "a"), 0o700|os.ModeSticky)
	os.Chmod(top, 0o700)
	Searchable(deep)
	for p, want := range map[string]os.FileMode{
		deep: 0o711, filepath.Join(top, "a"): 0o711 | os.ModeSticky, top: 0o711,
	} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode() & (os.ModePerm | os.ModeSticky); got != want {
			t.Errorf("%s: mode %v, want %v", p, got, want)
		}
	}
	if st, _ := os.Stat(os.TempDir()); st.Mode() != tmp.Mode() {
		t.Errorf("the temporary directory's mode went from %v to %v", tmp.Mode(), st.Mode())
	}
}
