#!/usr/bin/env python3
# A stage 4 whose every request reaches a lab starter's stub: it logs the stub's TODO(student)
# line and closes the connection unanswered. grader.selftest.stub_named_in_report runs a check on it.
import socket,sys,signal
if '--help' in sys.argv:
    print("stage4-tuned --port N --workers N --queue N --shed-delay-ms N --shed-interval-ms N --no-poller-misses"); sys.exit(0)
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1); s.bind(("127.0.0.1",0)); s.listen(100)
print("listening on 127.0.0.1:%d"%s.getsockname()[1],flush=True)
signal.signal(signal.SIGTERM,lambda *a: sys.exit(0))
while True:
    c,_=s.accept(); c.recv(4096)
    sys.stderr.write("TODO(student) lab 4: TunedServer::submit\n"); sys.stderr.flush(); c.close()
