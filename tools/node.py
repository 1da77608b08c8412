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
# reaps children; `serve` answers HTTPS with the certificate files re-read at each handshake and, given
# --client-ca, requires and verifies a client certificate against that bundle (also re-read each time); `get`
# fetches a URL verifying the server against a CA file (and may present a client certificate), printing the
# body, or the error and exit 1; `handshakes` makes a new TLS connection and one request every --interval,
# for ever, and prints each failure, each change of the served certificate, and running counts.
# A key pair is read as two files: a reader can see one of them before and the other after the kubelet's
# atomic swap of a volume's ..data link, so a pair that does not load keeps the last good one in use (and
# the next handshake reads both again); that is what a server reloading its files must do.
PROBE_SOURCE = r'''package main

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
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
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	certs := x509.NewCertPool()
	if !certs.AppendCertsFromPEM(data) {
		return nil, errors.New("no certificate in " + file)
	}
	return certs, nil
}

func now() int64 { return time.Now().UnixMilli() }

// keyPair is a certificate and key file pair, re-read at each use. The two files are read one after the
// other, so a pair that does not load (one read before a swap of the files, one after) keeps the last
// good pair in use, and the next use reads both again.
type keyPair struct {
	cert, key, role string
	mu              sync.Mutex
	certPEM, keyPEM []byte
	pair            *tls.Certificate
}

func (p *keyPair) load() (*tls.Certificate, error) {
	certPEM, certErr := os.ReadFile(p.cert)
	keyPEM, keyErr := os.ReadFile(p.key)
	p.mu.Lock()
	defer p.mu.Unlock()
	err := errors.Join(certErr, keyErr)
	if err == nil && (!bytes.Equal(certPEM, p.certPEM) || !bytes.Equal(keyPEM, p.keyPEM)) {
		pair, pairErr := tls.X509KeyPair(certPEM, keyPEM)
		if pairErr == nil {
			leaf, _ := x509.ParseCertificate(pair.Certificate[0])
			p.certPEM, p.keyPEM, p.pair = certPEM, keyPEM, &pair
			fmt.Printf("loaded %d %s serial=%s\n", now(), p.role, leaf.SerialNumber.Text(16))
		} else {
			err = pairErr
			if p.pair != nil {
				fmt.Printf("kept %d %s: %v\n", now(), p.role, pairErr)
			}
		}
	}
	if p.pair == nil {
		return nil, err
	}
	return p.pair, nil
}

func serve(args []string) error {
	flags := flag.NewFlagSet("serve", flag.ExitOnError)
	addr := flags.String("addr", ":8443", "listen address")
	cert := flags.String("cert", "", "certificate file")
	key := flags.String("key", "", "key file")
	clientCA := flags.String("client-ca", "", "require client certificates and verify them against this bundle")
	flags.Parse(args)
	served := &keyPair{cert: *cert, key: *key, role: "server"}
	if _, err := served.load(); err != nil {
		return err
	}
	config := &tls.Config{MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return served.load() }}
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
			intermediates := x509.NewCertPool()
			for _, der := range raw[1:] {
				if parsed, err := x509.ParseCertificate(der); err == nil {
					intermediates.AddCert(parsed)
				}
			}
			usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
			_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates, KeyUsages: usage})
			return err
		}
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer, uri, serial := "-", "-", "-"
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			leaf := r.TLS.PeerCertificates[0]
			peer, serial = leaf.Subject.CommonName, leaf.SerialNumber.Text(16)
			if len(leaf.URIs) > 0 {
				uri = leaf.URIs[0].String()
			}
		}
		fmt.Fprintf(w, "ok client=%s uri=%s serial=%s\n", peer, uri, serial)
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

// handshake makes one connection (a full handshake, no session resumption) and one request on it, and
// returns the served leaf, the anchor its verified chain ends at, and the answer's first line.
func handshake(addr, name string, roots *x509.CertPool, client *keyPair,
	timeout time.Duration) (*x509.Certificate, *x509.Certificate, string, error) {
	config := &tls.Config{RootCAs: roots, ServerName: name, MinVersion: tls.VersionTLS12}
	if client != nil {
		config.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return client.load()
		}
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", addr, config)
	if err != nil {
		return nil, nil, "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", name); err != nil {
		return nil, nil, "", err
	}
	answer, err := io.ReadAll(conn)
	if err != nil {
		return nil, nil, "", err
	}
	text := string(answer)
	at := strings.Index(text, "ok client=")
	if !strings.HasPrefix(text, "HTTP/1.1 200") || at < 0 {
		return nil, nil, "", fmt.Errorf("unexpected answer %q", text)
	}
	state := conn.ConnectionState()
	chain := state.VerifiedChains[0]
	return state.PeerCertificates[0], chain[len(chain)-1], strings.TrimSpace(strings.SplitN(text[at:], "\n", 2)[0]), nil
}

// bundle is a trust bundle file, re-read at each use; each change of its CAs is printed (their subject
// key identifiers), so a test sees when a CA reached the pod and when one left it.
type bundle struct {
	file  string
	data  []byte
	roots *x509.CertPool
}

func (b *bundle) load() (*x509.CertPool, error) {
	data, err := os.ReadFile(b.file)
	if err != nil {
		return nil, err
	}
	if b.roots != nil && bytes.Equal(data, b.data) {
		return b.roots, nil
	}
	roots, keys, rest := x509.NewCertPool(), []string{}, data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		ca, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		roots.AddCert(ca)
		keys = append(keys, hex.EncodeToString(ca.SubjectKeyId))
	}
	if len(keys) == 0 {
		return nil, errors.New("no certificate in " + b.file)
	}
	b.data, b.roots = data, roots
	fmt.Printf("bundle %d keys=%s\n", now(), strings.Join(keys, ","))
	return roots, nil
}

func handshakes(args []string) error {
	flags := flag.NewFlagSet("handshakes", flag.ExitOnError)
	addr := flags.String("addr", "", "host:port to connect to")
	name := flags.String("name", "", "the name to verify the server's certificate for")
	ca := flags.String("ca", "", "trust bundle file")
	cert := flags.String("cert", "", "client certificate file")
	key := flags.String("key", "", "client key file")
	interval := flags.Duration("interval", 200*time.Millisecond, "pause between handshakes")
	every := flags.Duration("report", 2*time.Second, "how often to print the counts")
	first := flags.Duration("first", 60*time.Second, "how long to try for the first success (the window starts there)")
	timeout := flags.Duration("timeout", 5*time.Second, "each connection, handshake and answer")
	flags.Parse(args)
	var client *keyPair
	if *cert != "" {
		client = &keyPair{cert: *cert, key: *key, role: "client"}
	}
	trust := &bundle{file: *ca}
	ok, failed, started := 0, 0, false
	served, answered := "", ""
	reported, giveUp := time.Now(), time.Now().Add(*first)
	for {
		roots, err := trust.load()
		var leaf, anchor *x509.Certificate
		answer := ""
		if err == nil {
			leaf, anchor, answer, err = handshake(*addr, *name, roots, client, *timeout)
		}
		switch {
		case err != nil && !started:
			if time.Now().After(giveUp) {
				return fmt.Errorf("no handshake succeeded in %v: %w", *first, err)
			}
		case err != nil:
			failed++
			fmt.Printf("fail %d %v\n", now(), err)
		default:
			if !started {
				started = true
				fmt.Printf("first %d\n", now())
			}
			ok++
			if serial := leaf.SerialNumber.Text(16); serial != served {
				served = serial
				sum := sha256.Sum256(anchor.Raw)
				fmt.Printf("served %d serial=%s issuer-key=%s anchor=%s\n", now(), serial,
					hex.EncodeToString(leaf.AuthorityKeyId), hex.EncodeToString(sum[:]))
			}
			if answer != answered {
				answered = answer
				fmt.Printf("answer %d %s\n", now(), answer)
			}
		}
		if started && time.Since(reported) >= *every {
			reported = time.Now()
			fmt.Printf("count %d ok=%d fail=%d\n", now(), ok, failed)
		}
		time.Sleep(*interval)
	}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: node-probe pause | serve FLAGS | get FLAGS URL | handshakes FLAGS")
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
	case "handshakes":
		err = handshakes(os.Args[2:])
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
