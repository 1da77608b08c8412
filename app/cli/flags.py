"""Flag value types and the flags more than one command takes."""

from __future__ import annotations

import argparse
import re
import textwrap
from datetime import timedelta

from tls_injector.injection.profile import ProfileError, format_duration, go_duration
from tls_injector.names import MODE_ANNOTATION, MODE_SECRET, MODES

# Where a command adds its flags: the parser itself or one of its groups (`serve --help` groups its own).
Flags = argparse._ActionsContainer


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every flag's default in --help, except where there is none to show (None, a switch's False).

    A description or epilog is paragraphs: each blank-line-separated one is wrapped to the terminal,
    except one whose lines are indented (examples), which is printed as written so it can be pasted."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False or action.default == argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = [p for p in text.strip("\n").split("\n\n") if p.strip()]
        return "\n\n".join(_paragraph(p, width, indent) for p in paragraphs)


def _paragraph(text: str, width: int, indent: str) -> str:
    lines = text.splitlines()
    if any(line.startswith("  ") for line in lines[1:]) or lines[0].startswith("  "):
        return "\n".join(indent + line for line in lines)  # a heading and its examples, as written
    return textwrap.fill(" ".join(text.split()), width, initial_indent=indent, subsequent_indent=indent,
                         break_on_hyphens=False)  # a label such as tls-injector.io/inject stays whole


def port(value: str) -> int:
    """A TCP port, 0 meaning any free one: out of range, the socket layer would wrap it (99999 binds 34463)."""
    if not value.isdigit() or int(value) > 65535:  # the largest TCP port
        raise argparse.ArgumentTypeError(f"expected a port from 0 to 65535, got {quoted(value, 20)}")
    return int(value)


def host_port(value: str) -> tuple[str, int]:
    host, _, number = value.rpartition(":")
    if not host or not number.isdigit() or not 0 < int(number) < 65536:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {quoted(value)}")
    return host.strip("[]"), int(number)


def server_url(value: str) -> str:
    """http(s)://HOST[:PORT][/path]: without a scheme urllib3 guesses plain HTTP (and warns on stderr)."""
    scheme, _, rest = value.partition("://")
    if scheme not in ("http", "https") or not rest.split("/", 1)[0]:
        raise argparse.ArgumentTypeError(f"expected http(s)://HOST[:PORT], got {quoted(value)}")
    return value


# A Namespace's name is a DNS-1123 label, as the apiserver requires: at most 63 characters, lower-case
# letters, digits and inner hyphens.
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# kubectl's --request-timeout: a bare number is seconds, anything else a Go duration (time.ParseDuration:
# `1m30s`, `500ms`, `1.5h`; units ns, us, µs, ms, s, m, h and nothing longer, so no `1d`), read by the one
# reader of durations (app/injection/profile.py's go_duration), which the tls-injector.io/duration
# annotation and the profile flags take too. 64 characters hold any duration a person writes.
_SECONDS = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,9})?")
MAX_DURATION_CHARS = 64
MAX_TIMEOUT_SECONDS = 24 * 3600.0


def namespace(value: str) -> str:
    if not _LABEL.fullmatch(value):
        raise argparse.ArgumentTypeError(f"not a valid namespace name (a DNS-1123 label: at most 63 lower-case "
                                         f"letters, digits and inner hyphens): {quoted(value)}")
    return value


def duration(value: str) -> float:
    """Seconds from `30`, `30s`, `500ms`, `1m30s`, `1.5h` (kubectl's --request-timeout), above zero
    (kubectl's 0 means "wait forever", the silent wait this flag exists to end) and at most a day (a
    request unanswered for a day never will be; a bound also keeps an absurd value from overflowing the
    socket layer's timer)."""
    text = value.strip()
    seconds = 0.0
    if _SECONDS.fullmatch(text):
        seconds = float(text)
    elif len(text) <= MAX_DURATION_CHARS:
        try:
            seconds = round(float(go_duration(text)), 6)  # to the microsecond: the socket layer's timers
        except ProfileError:
            seconds = 0.0
    if not 0 < seconds <= MAX_TIMEOUT_SECONDS:
        raise argparse.ArgumentTypeError(f"expected a duration above zero and at most 24h, such as 30s, 500ms, "
                                         f"1m30s or 1.5h, got {quoted(value)}")
    return seconds


def duration_text(seconds: float) -> str:
    """Seconds as --help shows a duration flag's default and `duration` reads it back: 30s, 2m, 1.5s."""
    return format_duration(timedelta(seconds=seconds))


def quoted(value: str, limit: int = 100) -> str:
    """A flag's value quoted for a message as a shell would take it back, cut at `limit` characters:
    not Python's repr (no u'', no \\x escapes a person did not type)."""
    cut = value[:limit] + ("..." if len(value) > limit else "")
    return f'"{cut}"'


def cluster_domain(value: str) -> str:
    from tls_injector.pki.names import vet_cluster_domain  # noqa: PLC0415 - loads the PKI only when the flag is given

    try:
        return vet_cluster_domain(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


# The SPIFFE specification's trust domain: lowercase letters, digits, '.', '-' and '_', at most 255 characters.
_TRUST_DOMAIN = re.compile(r"[a-z0-9._-]{1,255}")


def trust_domain(value: str) -> str:
    if not _TRUST_DOMAIN.fullmatch(value):
        raise argparse.ArgumentTypeError(f"a SPIFFE trust domain is 1-255 of a-z 0-9 . - _, got {quoted(value)}")
    return value


def mode_flag(command: Flags) -> None:
    """--default-mode: shared by `serve` (what /mutate does) and `inject` (the same, offline)."""
    command.add_argument("--default-mode", choices=list(MODES), default=MODE_SECRET,
                         help=f"what injected pods get when their {MODE_ANNOTATION} annotation does not say: the "
                              f"workload's Secret and the trust-bundle ConfigMap, or a per-pod key and certificate "
                              f"(projected podCertificate) and the ClusterTrustBundle, where served")
