// Command authregistry is the registry the real-node tests run when a registry must require authentication:
// go-containerregistry's in-memory registry (what `crane registry serve` runs) behind HTTP basic authentication,
// as token-authenticated registries accept a token as the basic-auth password. A test fixture, not a product.
//
// The accepted user and password come from REGISTRY_USERNAME and REGISTRY_PASSWORD, read once at start: a
// rotated token takes effect when the pod restarts. /healthz answers without credentials, for probes.
// With --anonymous it asks for no credentials, and with --tls-cert and --tls-key it serves HTTPS only: the
// registry with a private CA that the node-pull tests need.
package main

import (
	"crypto/subtle"
	"flag"
	"io"
	"log"
	"net/http"
	"os"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	address := flag.String("address", ":5000", "address to listen on")
	anonymous := flag.Bool("anonymous", false, "serve everyone, without credentials")
	certificate := flag.String("tls-cert", "", "PEM certificate chain to serve HTTPS with (with --tls-key)")
	key := flag.String("tls-key", "", "PEM private key of --tls-cert")
	flag.Parse()
	user, password := os.Getenv("REGISTRY_USERNAME"), os.Getenv("REGISTRY_PASSWORD")
	if !*anonymous && (user == "" || password == "") {
		log.Fatal("REGISTRY_USERNAME and REGISTRY_PASSWORD must both be set (or --anonymous given)")
	}
	if (*certificate == "") != (*key == "") {
		log.Fatal("--tls-cert and --tls-key go together")
	}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	same := func(got, want string) bool { return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1 }
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.WriteHeader(http.StatusOK)
			return
		}
		if *anonymous {
			inner.ServeHTTP(w, r)
			return
		}
		gotUser, gotPassword, ok := r.BasicAuth()
		if !ok || !same(gotUser, user) || !same(gotPassword, password) {
			log.Printf("refused %s %s (credentials given: %v, user %q)", r.Method, r.URL.Path, ok, gotUser)
			w.Header().Set("WWW-Authenticate", `Basic realm="authregistry"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`))
			return
		}
		inner.ServeHTTP(w, r)
	})
	if *certificate != "" {
		log.Printf("serving HTTPS on %s (anonymous: %v)", *address, *anonymous)
		log.Fatal(http.ListenAndServeTLS(*address, *certificate, *key, handler))
	}
	log.Printf("serving on %s for user %q (anonymous: %v)", *address, user, *anonymous)
	log.Fatal(http.ListenAndServe(*address, handler))
}
