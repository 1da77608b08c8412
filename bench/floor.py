"""The floor of /mutate: this server's TLS and HTTP layer answering every review with one fixed answer.

    python -m bench.floor serve --host 127.0.0.1 --port 9443 --tls-cert-file tls.crt --tls-private-key-file tls.key

Serves what `tls-injector serve` serves (`tls_injector.web.server.build_server`: uvloop, the TLS context,
`tls_injector.web.http`, the endpoint's metrics and access line at log level info, as `serve` logs), with
/mutate's route replaced by a constant one: no decode, no plan, no key; every POST gets the answer
/mutate gives the yardstick's `plan` review (its patch, its uid). What is left is the cost no /mutate can
go under on this stack, so it is written beside the ratios as their floor (bench/results/mutate-plan.md).
It takes the arguments `serve` takes for where to listen and what to serve, so a harness that starts
`tls-injector serve` (the Go yardstick's ratio script) can start this in its place.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench.instructions import UID, stream
from tls_injector.admission import AdmissionResponse, Envelope, Kind
from tls_injector.cli.startup import HeldLogs
from tls_injector.injection import InjectionOptions, make_mutate_handler
from tls_injector.settings import ServeSettings


class ConstantRoute:
    """A route whose decode and handler cost nothing: the same request and the same answer every time."""

    def __init__(self, request: Envelope, response: AdmissionResponse) -> None:
        self.request, self.response = request, response

    def decode(self, body: bytes) -> Envelope:
        return self.request

    def handle(self, request: Envelope) -> AdmissionResponse:
        return self.response


def constant_route() -> ConstantRoute:
    """/mutate's own answer to the first review of the `plan` stream, fixed."""
    body = stream(1, new=False, plan=True)[0]
    response = make_mutate_handler(InjectionOptions()).answer(body)
    assert "patch" in response, response  # a floor that patches nothing would flatter it
    request = Envelope(uid=UID, kind=Kind(group="", version="v1", kind="Pod"), operation="CREATE",
                       namespace="team-a", name="", dryRun=False)
    return ConstantRoute(request, response)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("serve",))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9443)
    parser.add_argument("--tls-cert-file", type=Path, required=True)
    parser.add_argument("--tls-private-key-file", type=Path, required=True)
    parser.add_argument("--no-reconciler", action="store_true", help="accepted, as serve's: the floor has none")
    args = parser.parse_args()
    from tls_injector.web.server import build_server  # imported when serving, as serve does

    settings = ServeSettings(host=args.host, port=args.port, tls_cert_file=args.tls_cert_file,
                             tls_private_key_file=args.tls_private_key_file)
    with HeldLogs(settings.log_level) as start:
        route: Any = constant_route()
        server = build_server(settings, mutate=route, validate=route)
        server.on_started = start.started
        server.run()


if __name__ == "__main__":
    main()
