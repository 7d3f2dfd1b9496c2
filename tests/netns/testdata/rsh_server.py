# rsh_server.py ADDR PORT -- PREFIX...: a minimal remote shell for Open
# MPI's rsh launcher in tests. Each connection sends one command line; the
# server runs PREFIX... /bin/sh -c LINE in a session of its own with the
# connection as its standard output and error, and kills the session when
# the connection closes (mpirun killed its agent) or ends the connection
# when the command exits. Prints "listening" once it accepts.
import os
import signal
import socket
import subprocess
import sys
import threading

addr, port = sys.argv[1], int(sys.argv[2])
prefix = sys.argv[4:]
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((addr, port))
srv.listen(8)
print("listening", flush=True)


def serve(conn):
    line = b""
    while not line.endswith(b"\n"):
        b = conn.recv(1)
        if not b:
            conn.close()
            return
        line += b
    cmd = prefix + ["/bin/sh", "-c", line.decode().strip()]
    print("running", cmd, flush=True)
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=conn.fileno(),
                         stderr=conn.fileno(), start_new_session=True)

    def watch():
        # The agent sends nothing more: EOF means it is gone.
        try:
            while conn.recv(4096):
                pass
        except OSError:
            pass
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()
    rc = p.wait()
    print("exited", rc, flush=True)
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    conn.close()


while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
