"""The user-facing docs' tables hold what the product does, so a doc cannot drift from the code again.

Each test reads the markdown tables of the docs a user reads (app-owners, injection, operations, reconcile,
mtls, ...) and checks them against the product's own source of each fact, in both directions where both
make sense: the names users see (app/names.py), the DNS names a certificate carries (app/pki/names.py, by
calling it), the environment variables, the Event reasons the reconciler writes (read from its calls, and
the issuance Event by running a pass), the conditions of the status API, the metrics (by building the
registries the processes serve), and the alerts the shipped PrometheusRule fires.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from tests.kubeapi import Emulator
from tests.reconcile.cluster import Clock, deployment, reconciler, small_cluster
from tls_injector import names
from tls_injector.pki.names import dns_names_for_services, peer_dns_names
from tls_injector.reconcile.core.metrics import ExpiryGauge, ReconcileMetrics
from tls_injector.reconcile.parts import status as conditions
from tls_injector.web.metrics import ServerMetrics

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# What a user reads: README and docs/, less the pages written for the project's own developers.
FOR_DEVELOPERS = {"architecture.md", "cluster-tests.md", "release.md"}
USER_DOCS = [ROOT / "README.md", *sorted(p for p in DOCS.glob("*.md") if p.name not in FOR_DEVELOPERS)]


# ---- reading markdown tables -------------------------------------------------------------------------


@dataclass(frozen=True)
class Table:
    path: Path
    line: int  # of the header row, 1-based
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def column(self, heading: str) -> list[str]:
        index = self.header.index(heading)
        return [row[index] for row in self.rows]


_SEPARATOR = re.compile(r"\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?")


def cells(line: str) -> tuple[str, ...]:
    """A table row's cells, trimmed; `\\|` is a pipe inside a cell (as GitHub reads it), also in code spans."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return tuple(cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", body))


def tables(path: Path) -> list[Table]:
    """Every table of a markdown file: a header row, its separator, then rows while lines start with `|`
    (fenced code blocks skipped)."""
    lines = path.read_text().splitlines()
    found, fenced, i = [], False, 0
    while i < len(lines):
        if lines[i].lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and lines[i].startswith("|") and i + 1 < len(lines) and _SEPARATOR.fullmatch(
                lines[i + 1].strip()):
            header, rows, j = cells(lines[i]), [], i + 2
            while j < len(lines) and lines[j].startswith("|"):
                rows.append(cells(lines[j]))
                j += 1
            found.append(Table(path, i + 1, header, tuple(rows)))
            i = j
            continue
        i += 1
    return found


def spans(text: str) -> list[str]:
    """The code spans of a piece of markdown (single backticks)."""
    return re.findall(r"`([^`\n]+)`", text)


def all_tables() -> Iterator[Table]:
    for path in USER_DOCS:
        yield from tables(path)


def table_with(path: Path, first_heading: str) -> Table:
    found = [t for t in tables(path) if t.header[0] == first_heading]
    assert len(found) == 1, f"{path.name}: {len(found)} tables headed {first_heading!r}"
    return found[0]


def test_the_reader_takes_cells_code_spans_escaped_pipes_and_skips_code_blocks(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("text\n\n| a | b |\n| --- | :---: |\n| `x\\|y` | two `z` |\n|  | last |\nafter\n\n"
                    "```\n| not | a table |\n| --- | --- |\n```\n")
    [table] = tables(page)
    assert (table.line, table.header) == (3, ("a", "b"))
    assert table.rows == (("`x|y`", "two `z`"), ("", "last"))
    assert spans(table.rows[0][1]) == ["z"]
    assert table.column("a") == ["`x|y`", ""]


def test_every_user_doc_is_read_and_has_its_tables() -> None:
    counted = {path.name: len(tables(path)) for path in USER_DOCS}
    assert {"app-owners.md", "injection.md", "operations.md", "reconcile.md", "mtls.md", "README.md"} <= set(counted)
    assert all(counted[name] > 0 for name in ("app-owners.md", "injection.md", "operations.md", "mtls.md"))


# ---- DNS names in a certificate ----------------------------------------------------------------------

PLACEHOLDERS = {"<service>": "billing", "<namespace>": "shop", "<cluster domain>": names.DEFAULT_CLUSTER_DOMAIN}


def filled(form: str) -> str:
    for placeholder, value in PLACEHOLDERS.items():
        form = form.replace(placeholder, value)
    return form


def test_app_owners_san_table_is_exactly_what_a_workload_certificate_names() -> None:
    """A doc promised `<service>` and `<service>.<namespace>`, which are never issued: an app dialling
    https://billing failed. The table now holds the forms issued, every one of them."""
    table = table_with(DOCS / "app-owners.md", "DNS name in the certificate")
    forms = [spans(cell)[0] for cell in table.column("DNS name in the certificate")]
    examples = [spans(cell)[0] for cell in table.column(table.header[1])]
    issued = dns_names_for_services(["billing"], "shop")
    assert sorted(filled(f) for f in forms) == issued
    assert sorted(examples) == issued
    assert [filled(f) for f in forms] == examples


def test_injection_statefulset_peer_names_are_the_peer_names_issued() -> None:
    table = table_with(DOCS / "injection.md", "mode")
    [secret_mode] = [row for row in table.rows if row[0] == "`secret`"]
    forms = [filled(s) for s in spans(secret_mode[1])]
    assert sorted(forms) == peer_dns_names("billing", "shop")


# ---- paths ---------------------------------------------------------------------------------------------

# The file names the product puts in each mounted directory, from its names (the bundle's per-CA keys are
# `ca-<sha256 prefix>.crt`, `client-ca-<...>.crt`).
FILES_IN = {
    names.CERT_MOUNT_PATH: {names.CERT_FILE, names.KEY_FILE, names.CA_FILE, names.KEYSTORE_KEY,
                            names.SECRET_TRUSTSTORE_KEY, names.KEYSTORE_PASSWORD_KEY},
    names.TRUST_MOUNT_PATH: {names.BUNDLE_KEY, names.TRUSTSTORE_KEY, names.CLIENT_BUNDLE_KEY,
                             names.CLIENT_TRUSTSTORE_KEY, names.PUBLIC_BUNDLE_KEY},
    names.CLIENT_MOUNT_PATH: {names.CERT_FILE, names.KEY_FILE, names.CA_FILE},
}
_PER_CA_KEY = re.compile(r"(client-)?ca-<[^>]+>\.crt")


def documented_paths() -> list[tuple[Table, str]]:
    return [(t, s) for t in all_tables() for row in t.rows for cell in row for s in spans(cell)
            if s.startswith("/etc/tls-injector")]


def test_every_path_a_doc_gives_is_a_directory_the_product_mounts_or_a_file_it_puts_there() -> None:
    """Tables and prose alike."""
    found = [(path, s) for path in USER_DOCS for s in spans(path.read_text()) if s.startswith("/etc/tls-injector")]
    assert len(found) >= 15  # the scan finds them (20 today)
    for doc, span in found:
        path = span.split()[0].rstrip(",.;:")
        directory = next((d for d in FILES_IN if path == d or path.startswith(d + "/")), None)
        assert directory is not None, f"{doc.name}: {span}: no directory tls-injector mounts"
        rest = path.removeprefix(directory).strip("/")
        assert rest == "" or rest in FILES_IN[directory] or _PER_CA_KEY.fullmatch(rest), (
            f"{doc.name}: {span}: no {rest} is put in {directory}")


def test_every_directory_the_product_mounts_is_in_a_table() -> None:
    shown = {path for _, path in documented_paths()}
    for directory in FILES_IN:
        assert any(p == directory or p.startswith(directory + "/") for p in shown), directory


def test_app_owners_path_table_names_what_each_mount_holds() -> None:
    table = table_with(DOCS / "app-owners.md", "path")
    paths = [spans(cell)[0] for cell in table.column("path")]
    assert paths == [f"{names.CERT_MOUNT_PATH}/{names.CERT_FILE}", f"{names.CERT_MOUNT_PATH}/{names.KEY_FILE}",
                     f"{names.CERT_MOUNT_PATH}/{names.CA_FILE}", f"{names.TRUST_MOUNT_PATH}/{names.BUNDLE_KEY}"]
    sources = table.column("from")
    assert f"`{names.TRUST_BUNDLE_CONFIGMAP}`" in sources[3]
    assert f"`{names.SECRET_NAME_ANNOTATION}`" in sources[0]


# ---- annotations and labels ----------------------------------------------------------------------------

DOMAIN_NAMES = {key: value for key, value in vars(names).items()
                if isinstance(value, str) and value.startswith(f"{names.DOMAIN}/")}
# Spelled in the docs as something the project does not have, saying so: mtls.md's "a second signer name
# (say `tls-injector.io/client`)", where it weighs a design it did not take.
HYPOTHETICAL = {"tls-injector.io/client": DOCS / "mtls.md"}
_DOMAIN_NAME = re.compile(r"tls-injector\.io/[a-z0-9-]+")


def _documented(value: str, found: set[str]) -> bool:
    return value in found or (value.endswith("-") and any(f.startswith(value) for f in found))


def test_every_name_of_the_domain_the_product_reads_or_writes_is_in_a_table() -> None:
    """Labels, annotations, the signer: each name of app/names.py under tls-injector.io/ has a row."""
    in_tables = {m for t in all_tables() for row in t.rows for cell in row for s in spans(cell)
                 for m in _DOMAIN_NAME.findall(s)}
    missing = {key: value for key, value in DOMAIN_NAMES.items() if not _documented(value, in_tables)}
    assert missing == {}


def test_every_name_of_the_domain_a_doc_spells_exists() -> None:
    """In tables and prose alike: a renamed or removed annotation leaves no doc behind."""
    values = set(DOMAIN_NAMES.values())
    for path in USER_DOCS:
        for span in spans(path.read_text()):
            for name in _DOMAIN_NAME.findall(span):
                if HYPOTHETICAL.get(name) == path:
                    continue
                known = name in values or any(v.endswith("-") and name.startswith(v) for v in values)
                assert known, f"{path.name}: `{span}` names {name}, which tls-injector does not have"


def test_the_hypothetical_names_are_still_only_hypothetical() -> None:
    for name, path in HYPOTHETICAL.items():
        assert name not in DOMAIN_NAMES.values()
        assert f"(say `{name}`)" in path.read_text()


def test_every_label_key_the_product_sets_or_reads_is_in_a_doc() -> None:
    keys = {key: value for key, value in vars(names).items() if key.endswith("_LABEL") and isinstance(value, str)}
    assert len(keys) >= 5
    every_span = {s for path in USER_DOCS for s in spans(path.read_text())}
    missing = {key: value for key, value in keys.items() if not any(value in s for s in every_span)}
    assert missing == {}


def test_the_opt_in_values_in_the_tables_are_the_ones_read() -> None:
    text = (DOCS / "app-owners.md").read_text()
    assert f'`{names.INJECT_LABEL}: "{names.POD_OPT_IN}"`' in text
    assert f"`{names.INJECT_LABEL}: {names.NAMESPACE_OPT_IN}`" in text


# ---- environment variables -----------------------------------------------------------------------------

_ENV = re.compile(r"[A-Z][A-Z0-9_]*_[A-Z0-9_]+")


def test_the_env_rows_name_exactly_the_variables_injected() -> None:
    rows = [row for t in tables(DOCS / "injection.md") for row in t.rows if row[0].startswith("env")]
    assert len(rows) == 2  # the Secret mode's opt-in, and trust-only's
    for row in rows:
        shown = [s for s in spans(" ".join(row)) if _ENV.fullmatch(s)]
        assert tuple(shown) == names.TLS_ENV_VARS


def test_app_owners_names_no_variable_the_product_does_not_set() -> None:
    shown = {s for s in spans((DOCS / "app-owners.md").read_text()) if _ENV.fullmatch(s)}
    assert shown == set(names.TLS_ENV_VARS)


# ---- Events -------------------------------------------------------------------------------------------

_EVENT_CALLS = {"announce", "emit", "event_body"}


def written_reasons() -> tuple[set[str], list[str]]:
    """The reasons spelled in calls that write Events, and where a reason is computed instead."""
    spelled, computed = set(), []
    for path in sorted((ROOT / "app").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if not isinstance(node, ast.Call):
                    continue
                called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                for keyword in node.keywords if called in _EVENT_CALLS else ():
                    if keyword.arg == "reason":
                        spelled |= _constants(keyword.value, computed, (str(path.relative_to(ROOT)), function.name))
    return spelled, computed


# Functions that take a reason and pass it on (`reason=reason`): the reasons are their callers'.
_PASSING_ON = {"announce", "emit"}


def _constants(value: ast.expr, computed: list[str], where: tuple[str, str]) -> set[str]:
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return {value.value}
    if isinstance(value, ast.IfExp):
        return _constants(value.body, computed, where) | _constants(value.orelse, computed, where)
    if not (isinstance(value, ast.Name) and where[1] in _PASSING_ON):
        computed.append(":".join(where))  # made by the code: from a variable, an f-string, a call
    return set()


def issuance_reasons(emu: Emulator) -> set[str]:
    """The Events of a pass that issues a serving and a client certificate, then of one that renews both:
    routine, so one Event per namespace and pass, whatever was issued."""
    small_cluster(emu, namespaces=1, per_namespace=0)
    deployment(emu, "api", "ns0", annotations={names.CLIENT_CERT_ANNOTATION: "true"})
    rec = reconciler(emu, Clock(datetime.now(UTC)))
    rec.run_pass()
    for secret in ("api-tls", "api-client-tls"):
        body = emu.get("secrets", secret, "ns0")
        assert body is not None, secret
        body["metadata"].setdefault("annotations", {})[names.FORCE_RENEW_ANNOTATION] = "now"
        emu.store.update(emu.resource("secrets"), "ns0", secret, body)
    assert rec.run_pass().reasons["renewed:force-renew"] == 2
    found = [str(e.get("reason")) for e in emu.objects("events", "ns0")]
    assert found == ["CertificatesIssued"] * 2, found
    return set(found)


def product_reasons(emu: Emulator) -> set[str]:
    spelled, computed = written_reasons()
    assert not computed, f"a reason computed in {computed}: spell it in the call, so this table can be held to it"
    return spelled | issuance_reasons(emu)


def test_the_events_table_is_every_reason_the_product_writes_and_no_other(kubeapi: Emulator) -> None:
    table = table_with(DOCS / "operations.md", "Event reason")
    documented = [spans(cell)[0] for cell in table.column("Event reason")]
    assert len(documented) == len(set(documented))
    assert set(documented) == product_reasons(kubeapi)
    kinds = dict(zip(documented, table.column("type"), strict=True))
    assert {reason for reason, kind in kinds.items() if kind == "Normal"} == {
        "CertificatesIssued", "PodCertificateIssued", "TLSChangeException"}
    assert set(kinds.values()) == {"Normal", "Warning"}


def test_every_documented_event_is_written() -> None:
    """Without a cluster: each reason of the Events table is spelled in a call that writes an Event."""
    spelled, _ = written_reasons()
    table = table_with(DOCS / "operations.md", "Event reason")
    assert {spans(cell)[0] for cell in table.column("Event reason")} <= spelled


def test_every_event_a_doc_names_in_prose_is_one_the_product_writes() -> None:
    spelled, _ = written_reasons()
    known = spelled
    text = (DOCS / "reconcile.md").read_text()
    listed = text[text.index("Events on workloads:"):text.index("A Warning is written once")]
    named = {s for s in spans(listed) if re.fullmatch(r"[A-Z][A-Za-z]+", s)}
    assert len(named) >= 10
    assert named <= known, named - known
    [mtls] = [t for t in tables(DOCS / "mtls.md") if t.header == ("what", "serving", "client")]
    in_mtls = {s for row in mtls.rows if "Event" in " ".join(row) or "Certificate" in " ".join(row)
               for cell in row for s in spans(cell) if re.fullmatch(r"[A-Z][a-z]+[A-Z][A-Za-z]+", s)}
    assert in_mtls
    assert in_mtls <= known, in_mtls - known


# ---- conditions ----------------------------------------------------------------------------------------


def test_the_conditions_table_is_every_reason_the_status_api_gives() -> None:
    table = table_with(DOCS / "operations.md", "condition")
    documented: set[str] = set()
    for row in table.rows:
        types = [t.strip() for t in row[0].split(",")]
        reasons = spans(row[2]) or types  # "the same": each condition's reason is its type
        assert row[1] in ("True", "False")
        documented |= set(reasons)
        if row[0] != "Ready":
            assert reasons == types, row
            assert row[1] == "True", row
    issued = conditions.conditions({}, not_after=datetime.now(UTC), renew_at=None)[0].reason
    pending = conditions.conditions({}, not_after=None, renew_at=None)[0].reason
    assert documented == {issued, pending, *conditions.NOT_READY, *conditions.BESIDE}


# ---- metrics -------------------------------------------------------------------------------------------


def exported_metrics() -> dict[str, tuple[str, tuple[str, ...]]]:
    """name -> (type, labels) of every family the webhook and the reconciler serve, from their registries."""
    registry = CollectorRegistry()
    ServerMetrics(registry)
    reconcile = ReconcileMetrics(registry)
    for part in vars(reconcile).values():
        if isinstance(part, ExpiryGauge):  # the per-object series exist only when asked for
            part.replace({("ns", "secret"): 1.0}, per_object=True)
    labels: dict[str, tuple[str, ...]] = {}
    for collector, family_names in registry._collector_to_names.items():
        for name in family_names:
            labels[name] = tuple(getattr(collector, "_labelnames", ()))
        for part in getattr(collector, "_parts", ()):
            for family in part.collect():
                labels[family.name] = tuple(getattr(part, "_labelnames", ()))
    exported = {}
    for family in registry.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        sampled = sorted({k for s in family.samples for k in s.labels if k != "le"})
        exported[name] = (family.type, tuple(sorted(labels.get(family.name, ()) or sampled)))
    return exported


def test_the_metrics_table_is_every_metric_served_with_its_type_and_labels() -> None:
    table = table_with(DOCS / "operations.md", "metric")
    documented = {spans(row[0])[0]: (row[1], tuple(sorted(spans(row[2])))) for row in table.rows}
    assert len(documented) == len(table.rows)
    assert documented == exported_metrics()


def test_every_metric_a_doc_names_anywhere_is_served() -> None:
    exported = set(exported_metrics())
    for path in USER_DOCS:
        for span in spans(path.read_text()):
            for name in re.findall(r"\btls_injector_[a-z0-9_]+", span):
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                assert name in exported or base in exported, f"{path.name}: `{span}`: {name} is not served"


# ---- alerts --------------------------------------------------------------------------------------------


def shipped_alerts() -> dict[str, tuple[str, str]]:
    rule = yaml.safe_load((ROOT / "manifests" / "components" / "monitoring" / "prometheusrule.yaml").read_text())
    return {r["alert"]: (r["labels"]["severity"], r["for"]) for group in rule["spec"]["groups"]
            for r in group["rules"] if "alert" in r}


def test_the_alerts_table_is_every_alert_shipped_with_its_severity_and_wait() -> None:
    table = table_with(DOCS / "operations.md", "alert")
    documented = {row[0]: (row[1], row[3]) for row in table.rows}
    assert len(documented) == len(table.rows)
    assert documented == shipped_alerts()


# ---- the checks catch drift ----------------------------------------------------------------------------


@pytest.mark.parametrize(("doc", "edit", "check"), [
    ("app-owners.md", ("| `<service>.<namespace>.svc` |", "| `<service>` |"),
     test_app_owners_san_table_is_exactly_what_a_workload_certificate_names),
    ("operations.md", ("| `ObjectTooLarge` |", "| `ObjectTooBig` |"), test_every_documented_event_is_written),
    ("operations.md", ("| `tls_injector_leader` | gauge |", "| `tls_injector_leader` | counter |"),
     test_the_metrics_table_is_every_metric_served_with_its_type_and_labels),
    ("operations.md", ("| TLSInjectorNoLeader | critical |", "| TLSInjectorNoLeader | warning |"),
     test_the_alerts_table_is_every_alert_shipped_with_its_severity_and_wait),
    ("injection.md", ("`tls-injector.io/cert-mount-path`", "`tls-injector.io/cert-path`"),
     test_every_name_of_the_domain_a_doc_spells_exists),
    ("injection.md", ("`SSL_CERT_FILE`, `REQUESTS_CA_BUNDLE`", "`SSL_CERT_DIR`, `REQUESTS_CA_BUNDLE`"),
     test_the_env_rows_name_exactly_the_variables_injected),
    ("mtls.md", ("`/etc/tls-injector/client`", "`/etc/tls-injector/clients`"),
     test_every_path_a_doc_gives_is_a_directory_the_product_mounts_or_a_file_it_puts_there),
])
def test_a_drifted_doc_is_caught(doc: str, edit: tuple[str, str], check: Callable[[], None], tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Each check reads the docs where DOCS and USER_DOCS say: it passes on the docs as they are, and fails
    on a copy with one cell changed."""
    check()
    copy = tmp_path / "docs"
    copy.mkdir()
    for path in DOCS.glob("*.md"):
        (copy / path.name).write_text(path.read_text())
    before, after = edit
    text = (copy / doc).read_text()
    assert before in text
    (copy / doc).write_text(text.replace(before, after, 1))
    here = sys.modules[__name__]
    monkeypatch.setattr(here, "DOCS", copy)
    monkeypatch.setattr(here, "USER_DOCS", [ROOT / "README.md", *sorted(p for p in copy.glob("*.md")
                                                                        if p.name not in FOR_DEVELOPERS)])
    with pytest.raises(AssertionError):
        check()
