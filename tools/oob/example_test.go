package oob_test

import (
	"fmt"

	"github.com/sroce/sroce/tools/oob"
)

// ExampleBWRow shows the shape of the rows a BW run prints.
func ExampleBWRow() {
	p, _ := oob.ParsePerftest(oob.WriteBW, nil)
	fmt.Print(oob.BWRow(p, oob.BWReport{Size: 4096, Iters: 100, BWPeak: 50.5, BWAvg: 42.25, MsgRate: 0.0108}))
	// Output:
	//  4096       100              50.50              42.25  		   0.010800
}
