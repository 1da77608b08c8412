"""Shared test helpers: a real HTTPS server on loopback, certificates on disk, AdmissionReviews."""
