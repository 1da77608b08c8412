"""Build what a real node runs, from Go modules, for the node tier of the tests (tests/node).

Kept to the standard library, like dev.py and kube.py, so it runs on a fresh clone:

    python3.11 tools/node.py build     # build when missing, print the folder of the binaries
    python3.11 tools/node.py path      # print that folder, exit 1 when it is not built yet

What it builds, with the ordinary Go toolchain from the Go module proxy (no prebuilt binary is fetched):
- kubelet, kube-scheduler and kube-proxy of the release tools/kube.py pins, from the same go.mod it
  writes (k8s.io/kubernetes with its staging modules replaced by their published twins), so the node
  and the control plane are one release;
- containerd, containerd-shim-runc-v2 and ctr from `github.com/containerd/containerd/v2` at CONTAINERD
  (`go install` of the module's own go.mod; no cgo, no btrfs snapshotter);
- `node-probe`, a small static program of ours (its source is PROBE_SOURCE below): the pods' sandbox
  ("pause") process and the tests' TLS server and client inside pods. No registry is reachable, so the
  tests make their images themselves (tests/node/images.py) from it and Debian's busybox-static.

The binaries are cached outside the checkout, under $TLS_INJECTOR_NODE_CACHE (default
~/.cache/tls-injector/node), in a folder named by the versions (and the probe by a digest of its
source): changing KUBERNETES, CONTAINERD or the probe builds anew, anything else reuses it.
The runtime's other parts come from Debian (runc, the CNI plugins, iptables, conntrack): tools/dev.py
installs them with the suite's other system tools.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import kube

CONTAINERD = "2.4.2"
KUBE_BINARIES = ("kubelet", "kube-scheduler", "kube-proxy")
CONTAINERD_BINARIES = ("containerd", "containerd-shim-runc-v2", "ctr")

# The sandbox process of every pod and the TLS peers of the tests. `pause` waits for a stop signal and
# reaps children; `serve` answers HTTPS with the certificate files re-read at each handshake (a renewed
# certificate is served without a restart) and, given --client-ca, asks for and verifies a client
# certificate; `get` fetches a URL verifying the server against a CA file (and may present a client
# certificate), printing the body, or the verification error and exit 1.
PROBE_SOURCE = r'''package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func pause() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s == syscall.SIGCHLD {
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}

func pool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	certs := x509.NewCertPool()
	if !certs.AppendCertsFromPEM(pem) {
		return nil, errors.New("no certificate in " + file)
	}
	return certs, nil
}

func serve(args []string) error {
	flags := flag.NewFlagSet("serve", flag.ExitOnError)
	addr := flags.String("addr", ":8443", "listen address")
	cert := flags.String("cert", "", "certificate file")
	key := flags.String("key", "", "key file")
	clientCA := flags.String("client-ca", "", "verify client certificates against this bundle")
	flags.Parse(args)
	config := &tls.Config{MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			pair, err := tls.LoadX509KeyPair(*cert, *key)
			return &pair, err
		}}
	if *clientCA != "" {
		config.ClientAuth = tls.RequireAnyClientCert
		config.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			roots, err := pool(*clientCA)
			if err != nil {
				return err
			}
			leaf, err := x509.ParseCertificate(raw[0])
			if err != nil {
				return err
			}
			usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
			_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: usage})
			return err
		}
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer := "-"
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			peer = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		fmt.Fprintf(w, "ok client=%s\n", peer)
	})
	server := &http.Server{Addr: *addr, Handler: handler, TLSConfig: config, ReadHeaderTimeout: 10 * time.Second}
	return server.ListenAndServeTLS("", "")
}

func get(args []string) error {
	flags := flag.NewFlagSet("get", flag.ExitOnError)
	ca := flags.String("ca", "", "trust bundle file")
	cert := flags.String("cert", "", "client certificate file")
	key := flags.String("key", "", "client key file")
	timeout := flags.Duration("timeout", 10*time.Second, "whole request")
	flags.Parse(args)
	roots, err := pool(*ca)
	if err != nil {
		return err
	}
	config := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if *cert != "" {
		pair, err := tls.LoadX509KeyPair(*cert, *key)
		if err != nil {
			return err
		}
		config.Certificates = []tls.Certificate{pair}
	}
	client := &http.Client{Timeout: *timeout, Transport: &http.Transport{TLSClientConfig: config}}
	answer, err := client.Get(flags.Arg(0))
	if err != nil {
		return err
	}
	defer answer.Body.Close()
	body, err := io.ReadAll(answer.Body)
	if err != nil {
		return err
	}
	fmt.Print(string(body))
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: node-probe pause | serve FLAGS | get FLAGS URL")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "pause":
		pause()
	case "serve":
		err = serve(os.Args[2:])
	case "get":
		err = get(os.Args[2:])
	default:
		err = errors.New("unknown command " + os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "node-probe:", err)
		os.Exit(1)
	}
}
'''


def cache_root() -> Path:
    configured = os.environ.get("TLS_INJECTOR_NODE_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "tls-injector" / "node"


def bin_dir() -> Path:
    return cache_root() / f"v{kube.KUBERNETES}-containerd{CONTAINERD}" / "bin"


def probe_path() -> Path:
    digest = hashlib.sha256(PROBE_SOURCE.encode()).hexdigest()[:12]
    return cache_root() / f"probe-{digest}" / "node-probe"


def built() -> bool:
    return all((bin_dir() / name).is_file() for name in (*KUBE_BINARIES, *CONTAINERD_BINARIES)) \
        and probe_path().is_file()


def _go(*argv: str, cwd: Path, env: dict[str, str]) -> str:
    print("+ go " + " ".join(argv), file=sys.stderr, flush=True)
    go = shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")
    if go is None:
        raise SystemExit("go is not installed: the node tier builds its binaries from Go modules")
    done = subprocess.run([go, *argv], cwd=cwd, env=env, check=True, stdout=subprocess.PIPE, text=True)
    return done.stdout


def _build_kube(out: Path, env: dict[str, str]) -> None:
    src = bin_dir().parent / "src-kube"
    src.mkdir(parents=True, exist_ok=True)
    kube._write_module(src, kube._kubernetes_gomod(src, env))  # the control plane's go.mod, one release
    _go("build", "-trimpath", "-ldflags", kube._ldflags(), "-o", str(out) + "/",
        *(f"k8s.io/kubernetes/cmd/{name}" for name in KUBE_BINARIES), cwd=src, env=env)


def _build_containerd(out: Path, env: dict[str, str]) -> None:
    ldflags = (f"-s -w -X github.com/containerd/containerd/v2/version.Version=v{CONTAINERD}"
               " -X github.com/containerd/containerd/v2/version.Revision=module")
    _go("install", "-trimpath", "-tags", "no_btrfs", "-ldflags", ldflags,
        *(f"github.com/containerd/containerd/v2/cmd/{name}@v{CONTAINERD}" for name in CONTAINERD_BINARIES),
        cwd=out, env={**env, "GOBIN": str(out), "GOFLAGS": ""})


def _build_probe(env: dict[str, str]) -> None:
    target = probe_path()
    src = target.parent / "src"
    src.mkdir(parents=True, exist_ok=True)
    (src / "go.mod").write_text("module tls-injector.test/node-probe\n\ngo 1.26.0\n")
    (src / "main.go").write_text(PROBE_SOURCE)
    _go("build", "-trimpath", "-ldflags", "-s -w", "-o", str(target) + ".partial", ".", cwd=src, env=env)
    Path(str(target) + ".partial").rename(target)


def build() -> Path:
    if built():
        return bin_dir()
    env = {**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    if not all((bin_dir() / name).is_file() for name in (*KUBE_BINARIES, *CONTAINERD_BINARIES)):
        out = bin_dir().with_name("bin.partial")
        out.mkdir(parents=True, exist_ok=True)
        _build_kube(out, env)
        _build_containerd(out, env)
        shutil.rmtree(bin_dir(), ignore_errors=True)
        out.rename(bin_dir())
    if not probe_path().is_file():
        _build_probe(env)
    return bin_dir()


def main(argv: list[str]) -> int:
    return kube.command(argv, build=build, bin_dir=bin_dir, built=built, usage=__doc__)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
