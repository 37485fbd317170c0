// Package pullsecret proves, with the kubelet's own credential code, that a pull Secret local-registry-publisher
// wrote gives the expected credentials for images under every published address and nothing for other hosts.
//
// tests/pull_secrets.rs runs it against a Secret read back from the API server:
//
//	LRP_PULL_SECRET     path of the Secret as JSON, as the API server returned it
//	LRP_PULL_ADDRESSES  comma-separated host:port addresses that must resolve
//	LRP_PULL_USERNAME   the user name they must resolve to
//	LRP_PULL_PASSWORD   the password or token they must resolve to
package pullsecret

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/credentialprovider"
	"k8s.io/kubernetes/pkg/credentialprovider/secrets"
)

func env(t *testing.T, name string) string {
	value := os.Getenv(name)
	if value == "" {
		t.Fatalf("%s is not set: this test checks a Secret that tests/pull_secrets.rs writes and passes in", name)
	}
	return value
}

func TestTheKubeletResolvesEveryPublishedAddressAndNothingElse(t *testing.T) {
	text, err := os.ReadFile(env(t, "LRP_PULL_SECRET"))
	if err != nil {
		t.Fatal(err)
	}
	var secret v1.Secret
	if err := json.Unmarshal(text, &secret); err != nil {
		t.Fatalf("the Secret is not valid JSON: %v", err)
	}
	// The kubelet's path: pod pull Secrets into a keyring, then a lookup per image.
	keyring, err := secrets.MakeDockerKeyring([]v1.Secret{secret}, &credentialprovider.BasicDockerKeyring{})
	if err != nil {
		t.Fatalf("the kubelet rejects the Secret: %v", err)
	}
	username, password := env(t, "LRP_PULL_USERNAME"), env(t, "LRP_PULL_PASSWORD")
	addresses := strings.Split(env(t, "LRP_PULL_ADDRESSES"), ",")
	for _, address := range addresses {
		for _, image := range []string{address + "/app:1", address + "/team/app@sha256:" + strings.Repeat("a", 64)} {
			found, ok := keyring.Lookup(image)
			if !ok || len(found) != 1 {
				t.Errorf("%s: want one credential, got %d (found %v)", image, len(found), ok)
				continue
			}
			if found[0].Username != username || found[0].Password != password {
				t.Errorf("%s: got user %q and a password of %d bytes, want user %q and the expected password",
					image, found[0].Username, len(found[0].Password), username)
			}
		}
		// The kubelet matches the port exactly: the same host on another port gets nothing.
		host := address[:strings.LastIndex(address, ":")]
		for _, other := range []string{host + ":1/app:1", host + "/app:1"} {
			if found, ok := keyring.Lookup(other); ok {
				t.Errorf("%s: want no credential, got %d", other, len(found))
			}
		}
	}
	for _, other := range []string{"docker.io/library/busybox:1", "elsewhere.example:5000/app:1"} {
		if found, ok := keyring.Lookup(other); ok {
			t.Errorf("%s: want no credential, got %d", other, len(found))
		}
	}
	t.Logf("the kubelet's keyring resolves %d addresses to user %q", len(addresses), username)
}
