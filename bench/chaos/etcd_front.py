# SPDX-License-Identifier: MIT
"""A pass-through TCP front for one etcd member, for the chaos harness's member faults the agents
must survive: `python3 etcd_front.py LISTEN_ADDR LISTEN_PORT MEMBER_ADDR MEMBER_PORT MODE_FILE`.
MODE_FILE holds one word, read for every connection and every chunk: `pass` (forward both ways),
`hole` (accept, read, never answer: open streams go silent too), `503` (answer every new request
with HTTP 503 and close; open streams are cut). Runs until killed."""
import socket
import sys
import threading

listen_addr, listen_port, member_addr, member_port, mode_file = sys.argv[1:6]


def mode():
    try:
        with open(mode_file) as f:
            return f.read().strip() or "pass"
    except OSError:
        return "pass"


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            m = mode()
            if m == "hole":
                continue  # swallowed: the other side hears nothing
            if m == "503":
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(client):
    m = mode()
    if m == "hole":
        try:
            while client.recv(65536):
                pass
        except OSError:
            pass
        client.close()
        return
    if m == "503":
        try:
            client.recv(65536)
            client.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                           b"Connection: close\r\n\r\n")
        except OSError:
            pass
        client.close()
        return
    try:
        upstream = socket.create_connection((member_addr, int(member_port)), timeout=2)
        upstream.settimeout(None)
    except OSError:
        client.close()  # the member is down: as a refused connection would be
        return
    threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
    pump(upstream, client)


def main():
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((listen_addr, int(listen_port)))
    server.listen(128)
    while True:
        client, _ = server.accept()
        threading.Thread(target=serve, args=(client,), daemon=True).start()


if __name__ == "__main__":
    main()
