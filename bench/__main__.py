"""Run the benchmarks and write bench/results/latest.md and latest.json.

    python -m bench all               # every benchmark present
    python -m bench admission         # one of them (several may be named)
    python -m bench all --quick       # short runs: checks that everything runs, numbers not to quote

Admission runs in this process (bench.admission). The others (bench.pki, bench.rules, bench.mutate_cpu,
bench.reconcile, bench.doctor, bench.workers, bench.soak) are run as `python -m bench.<name>` subprocesses
and their printed output is kept as is, so each owns its own arguments; one that is missing or fails is
reported, and the rest still run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
OTHERS = ("pki", "rules", "mutate_cpu", "reconcile", "doctor", "workers", "soak")
NAMES = ("admission", *OTHERS)
# A benchmark that runs longer than this is stuck, not slow: reconcile of 10,000 workloads is the
# longest expected, at a few minutes.
SUBPROCESS_TIMEOUT_SECONDS = 1800
# Runs beyond a module's defaults: issue 8 asks for reconcile at 1,000 and at 10,000 workloads.
EXTRA_RUNS: dict[str, list[list[str]]] = {"reconcile": [["--workloads", "10000", "--namespaces", "1000"]]}
# With --quick, the soak runs seconds instead of its 10 minutes: it then checks that it runs, nothing more.
QUICK_ARGS: dict[str, list[str]] = {"soak": ["--seconds", "20", "--warmup", "5", "--interval", "5"]}


def machine() -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in _read("/proc/cpuinfo").splitlines()
                if line.startswith("model name")), platform.processor() or "unknown")
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "commit": _git("rev-parse", "--short", "HEAD"),
        "load_average_before": os.getloadavg(),
    }


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_admission(quick: bool, seconds: float) -> dict[str, Any]:
    from bench import admission

    try:
        results = admission.run(seconds=2.0 if quick else seconds)
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:  # report it; the others still run
        return {"status": f"failed ({error})", "output": repr(error)}
    return {"status": "ok", "markdown": admission.markdown(results), "data": results,
            "targets": admission.targets(results), "ratios": admission.ratios(results)}


def run_other(name: str, *, quick: bool) -> dict[str, Any]:
    if importlib.util.find_spec(f"bench.{name}") is None:
        return {"status": "missing", "output": f"bench/{name}.py is not present in this checkout"}
    runs: list[list[str]] = [QUICK_ARGS.get(name, [])] if quick else [[], *EXTRA_RUNS.get(name, [])]
    results = [_subprocess(name, args) for args in runs]
    failed = [r["status"] for r in results if r["status"] != "ok"]
    return {"status": failed[0] if failed else "ok", "output": "\n\n".join(r["output"] for r in results)}


def _subprocess(name: str, args: list[str]) -> dict[str, Any]:
    command = [sys.executable, "-m", f"bench.{name}", *args]
    shown = " ".join(["python", *command[1:]])
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                              timeout=SUBPROCESS_TIMEOUT_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "output": f"`{shown}` timed out after {SUBPROCESS_TIMEOUT_SECONDS} s"}
    status = "ok" if done.returncode == 0 else f"failed (exit {done.returncode})"
    output = done.stdout if done.returncode == 0 else done.stdout + "\n" + done.stderr[-4000:]
    return {"status": status, "output": f"`{shown}`\n\n{output.strip()}"}


def run_all(names: list[str], *, quick: bool, seconds: float) -> dict[str, Any]:
    report: dict[str, Any] = {"machine": machine(), "quick": quick, "benchmarks": {}}
    for name in names:
        print(f"bench: running {name}", file=sys.stderr, flush=True)
        started = time.monotonic()
        result = run_admission(quick, seconds) if name == "admission" else run_other(name, quick=quick)
        result["seconds"] = round(time.monotonic() - started, 1)
        report["benchmarks"][name] = result
    report["machine"]["load_average_after"] = os.getloadavg()
    return report


def to_markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        "# tls-injector benchmark results",
        "",
        f"{m['date']} · {m['nproc']} CPUs ({m['cpu']}) · Python {m['python']} · Linux {m['kernel']} · "
        f"commit {m['commit']}" + (" · **quick run: smoke numbers, not to quote**" if report["quick"] else ""),
        f"Load average before / after: {_load(m['load_average_before'])} / {_load(m['load_average_after'])} "
        "(other work on the machine makes absolute numbers noisy; compare the ratios of the same run).",
        "",
        "| benchmark | status | seconds |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {name} | {r['status']} | {r['seconds']} |" for name, r in report["benchmarks"].items()]
    for name, result in report["benchmarks"].items():
        lines += ["", f"## {name}", ""]
        body = result.get("markdown") or result.get("output") or ""
        is_table = any(line.startswith("|") for line in body.splitlines())
        lines += [body] if is_table else ["```", body, "```"]
    return "\n".join(lines) + "\n"


def _load(values: tuple[float, float, float]) -> str:
    return " ".join(f"{v:.2f}" for v in values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", default=["all"], choices=["all", *NAMES], metavar="NAME",
                        help=f"all, or some of: {', '.join(NAMES)}")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each admission run")
    parser.add_argument("--quick", action="store_true", help="2 s admission runs, for a smoke test")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where latest.md and latest.json go")
    args = parser.parse_args(argv)
    names = list(NAMES) if "all" in args.names else list(dict.fromkeys(args.names))
    report = run_all(names, quick=args.quick, seconds=args.seconds)
    text = to_markdown(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.md").write_text(text)
    (args.out / "latest.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(text)
    print(f"bench: wrote {args.out / 'latest.md'} and latest.json", file=sys.stderr)
    return 0 if all(r["status"] in ("ok", "missing") for r in report["benchmarks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
