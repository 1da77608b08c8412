"""What runs passes: the long-running loop (controller.py: lease, queue, keyed and full passes, resync) over
its informer cache (cache.py), wired from settings by runner.py, and the one-shot run of the webhook's
self-care for `tls-injector bootstrap` (webhook.py, bootstrap.py).

Nothing under tls_injector.reconcile imports this package: it sits on top of the pass.
"""
