"""Checks of the webhook's own TLS: configurations present, caBundle trusting the Secret and what is served."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tls_injector.doctor.exceptions import check_exceptions_guarded
from tls_injector.doctor.model import Result, error, ok, warning
from tls_injector.doctor.snapshot import Snapshot
from tls_injector.kube import Obj
from tls_injector.pki import load_certificates
from tls_injector.reconcile.core.objects import secret_data
from tls_injector.reconcile.parts.webhook_plan import entry_dns_name, entry_trust_problem

CATEGORY = "tls-injector webhook"
BREAK_GLASS = ("to unblock the cluster at once, delete both webhook configurations (README, break glass), "
               "fix the cause, then apply the manifests again")


def service_dns_name(snap: Snapshot) -> str:
    """The name the API server dials for the webhook's Service, and checks the certificate for."""
    return f"{snap.settings.webhook.service}.{snap.settings.namespace}.svc"


def entries(snap: Snapshot) -> Iterator[tuple[Obj, Obj]]:
    """(configuration, entry) for every entry of every configuration found."""
    for config in snap.configs.values():
        for entry in (config or {}).get("webhooks") or []:
            yield config or {}, entry


def _entry_label(config: Obj, entry: Obj) -> str:
    return f"{config.get('kind', 'WebhookConfiguration')} {config['metadata']['name']} entry {entry.get('name')}"


def check_configurations(snap: Snapshot) -> Result:
    title = "the webhook configurations exist"
    if "configs" in snap.errors:
        return error(CATEGORY, title, f"cannot read them: {snap.errors['configs']}",
                     hint="doctor needs get on mutating/validatingwebhookconfigurations")
    if not snap.configs:
        return warning(CATEGORY, title, "none to check: --webhook-configurations is empty",
                       hint="name the webhook configurations (default: tls-injector)")
    missing = [f"{kind} {name}" for (kind, name), obj in sorted(snap.configs.items()) if obj is None]
    if missing:
        return error(CATEGORY, title, f"missing: {', '.join(missing)}", details=(),
                     hint="apply the manifests (kubectl apply -k manifests/overlays/<yours>), then run the bootstrap "
                          "Job; without the mutating one no pod is injected, without the validating one nothing "
                          "guards TLS at apply time")
    found = ", ".join(f"{kind} {name}" for kind, name in sorted(snap.configs))
    return ok(CATEGORY, title, found)


def check_ca_bundle_trusts_secret(snap: Snapshot) -> Result:
    """Every entry's caBundle verifies the serving Secret's certificate (what the pods will serve)."""
    title = "every caBundle trusts the serving certificate Secret"
    where = f"{snap.settings.namespace}/{snap.settings.webhook.secret_name}"
    if "serving_secret" in snap.errors:
        return error(CATEGORY, title, f"cannot read Secret {where}: {snap.errors['serving_secret']}",
                     hint="doctor needs get on Secrets in the injector's namespace")
    chain = load_certificates(secret_data(snap.serving_secret).get("tls.crt", b""))
    if snap.serving_secret is None or not chain:
        state = "does not exist" if snap.serving_secret is None else "holds no certificate"
        return error(CATEGORY, title, f"Secret {where} {state}",
                     hint="run the bootstrap Job (kubectl apply -k manifests/overlays/<yours>/bootstrap) or "
                          "`tls-injector bootstrap`; the webhook pods cannot start without it")
    count = sum(1 for _ in entries(snap))
    if count == 0:  # nothing was checked: no configuration entry holds a caBundle to verify against
        return warning(CATEGORY, title, "not checked: no webhook configuration entry to check",
                       hint="see the checks above")
    problems = _entry_problems(snap, chain)
    if problems:
        return error(CATEGORY, title, f"{len(problems)} entries would refuse it", details=problems,
                     hint="the reconciler rewrites every caBundle on its next pass; if it is not running, run "
                          "`tls-injector bootstrap` (or the bootstrap Job) now")
    return ok(CATEGORY, title, f"Secret {where}, {count} entries")


def check_served_certificate(snap: Snapshot) -> Result:
    """Every entry's caBundle verifies the certificate the webhook actually serves (the classic outage)."""
    title = "every caBundle trusts the certificate the webhook serves"
    if not snap.served:
        return warning(CATEGORY, title, "not checked: no webhook configuration entry to connect to",
                       hint="see the checks above")
    failed = [s for s in snap.served if s.error]
    unreachable = [s for s in failed if not s.explicit]
    if failed and not unreachable:
        return error(CATEGORY, title, "cannot connect", details=[f"{s.address}: {s.error}" for s in failed],
                     hint="check the address given with --webhook-address (a running `kubectl port-forward`?) and "
                          "that the webhook pods run: kubectl -n "
                          f"{snap.settings.namespace} get pods -l app.kubernetes.io/component=webhook")
    problems = [p for s in snap.served if not s.error for p in _entry_problems(snap, load_certificates(s.chain_pem),
                                                                                 server_name=s.server_name)]
    if problems:
        return error(CATEGORY, title, f"the API server refuses the served certificate in {len(problems)} entries",
                     details=problems,
                     hint="every admission call fails (`failed calling webhook ... x509`). If the check above "
                          "passes, the pods serve an old certificate: kubectl -n "
                          f"{snap.settings.namespace} rollout restart deployment/{snap.settings.webhook.service}; "
                          + BREAK_GLASS)
    if unreachable:
        return warning(CATEGORY, title, "not checked: cannot connect from here",
                       details=[f"{s.address}: {s.error}" for s in unreachable],
                       hint=f"run `kubectl -n {snap.settings.namespace} port-forward "
                            f"svc/{snap.settings.webhook.service} 8443:443` and pass --webhook-address 127.0.0.1:8443")
    return ok(CATEGORY, title, ", ".join(f"{s.server_name} via {s.address}" for s in snap.served))


def _entry_problems(snap: Snapshot, chain: list[Any], *, server_name: str | None = None) -> list[str]:
    problems = []
    for config, entry in entries(snap):
        dns_name = entry_dns_name(entry, default=service_dns_name(snap))
        if server_name is not None and dns_name != server_name:
            continue  # this entry calls another host; its own connection is checked
        problem = entry_trust_problem(entry, chain, dns_name=dns_name, now=snap.now)
        if problem:
            problems.append(f"{_entry_label(config, entry)}: {problem}")
    return problems


def served_targets(snap: Snapshot) -> list[tuple[str, int]]:
    """(host name, port) the API server dials, one per distinct target of the entries found."""
    targets: dict[tuple[str, int], None] = {}
    for _, entry in entries(snap):
        service = (entry.get("clientConfig") or {}).get("service") or {}
        port = int(service.get("port") or 443)
        targets[entry_dns_name(entry, default=service_dns_name(snap)), port] = None
    return list(targets)


def checks(snap: Snapshot) -> list[Result]:
    return [check_configurations(snap), check_ca_bundle_trusts_secret(snap), check_served_certificate(snap),
            check_exceptions_guarded(snap)]


__all__ = ["checks", "served_targets", "service_dns_name"]
