"""tls-injector: working TLS for every labelled workload in a Kubernetes cluster."""
