"""The webhook's server: HTTPS on the admission port (/mutate, /validate), the probe and metrics listener,
serving-certificate reload, worker processes and drain. The only package that speaks HTTP; what a review
means is tls_injector.admission's, and what to answer is the injector's and the rules' (handed in by tls_injector.cli).
"""
