"""A real gRPC server for t/tests/grpc.rs: grpcio with the standard
grpc.health.v1 Health service (grpcio-health-checking), whose statuses the
test switches while it runs.

    grpc_health_server.py PORT [--tls CERT KEY] [--no-health]
    grpc_health_server.py call HOST:PORT N


Prints "ready PORT" once it serves. Then reads commands on stdin, one a
line, and answers "ok" to each:

    set SERVICE SERVING|NOT_SERVING|UNKNOWN|SERVICE_UNKNOWN   ("" is written -)
    clear SERVICE          forget the service (a check for it: NOT_FOUND)
    quit

--no-health serves no Health service at all: a check is answered
UNIMPLEMENTED (grpc-status 12). `call` is a client instead: N Health/Check
calls for "" over h2c (through an nginx grpc_pass, say), one line each:
the status's name, or "error CODE". Every address is loopback.
"""

import sys
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc


def call(target, n):
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for _ in range(n):
            try:
                r = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
                name = health_pb2.HealthCheckResponse.ServingStatus.Name(r.status)
                print(name, flush=True)
            except grpc.RpcError as e:
                print(f"error {e.code().name}", flush=True)


def main():
    args = sys.argv[1:]
    if args[0] == "call":
        call(args[1], int(args[2]))
        return
    port = int(args[0])
    tls = None
    if "--tls" in args:
        i = args.index("--tls")
        with open(args[i + 1], "rb") as f:
            cert = f.read()
        with open(args[i + 2], "rb") as f:
            key = f.read()
        tls = grpc.ssl_server_credentials([(key, cert)])
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    servicer = health.HealthServicer()
    if "--no-health" not in args:
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    addr = f"127.0.0.1:{port}"
    if tls is None:
        server.add_insecure_port(addr)
    else:
        server.add_secure_port(addr, tls)
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    server.start()
    print(f"ready {port}", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        name = "" if len(words) < 2 or words[1] == "-" else words[1]
        if words[0] == "set":
            status = getattr(health_pb2.HealthCheckResponse, words[2])
            servicer.set(name, status)
        elif words[0] == "clear":
            # Not in the servicer's map: Check answers NOT_FOUND.
            servicer._server_status.pop(name, None)
        print("ok", flush=True)
    server.stop(0)


if __name__ == "__main__":
    main()
