// Command crioimage does for the testbed's CRI-O node what `ctr` does for its containerd node, with the library
// CRI-O itself links (go.podman.io/image at the version tools/crio pins):
//
//	crioimage import <root> <runroot> <oci-layout-dir> <name>   copy an OCI layout into CRI-O's image store
//	crioimage resolve <registries.conf> <registries.conf.d> <image>
//	                                                             print, in order, where CRI-O pulls <image> from:
//	                                                             one "<location> insecure=<bool> <reference>" per line
package main

import (
	"context"
	"fmt"
	"os"

	"go.podman.io/image/v5/copy"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/oci/layout"
	"go.podman.io/image/v5/pkg/sysregistriesv2"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/storage"
	"go.podman.io/image/v5/types"
	cstorage "go.podman.io/storage"
	"go.podman.io/storage/pkg/reexec"
)

func main() {
	// The store applies layers in a re-executed child of this binary.
	if reexec.Init() {
		return
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "crioimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 5 && args[0] == "import" {
		return importLayout(args[1], args[2], args[3], args[4])
	}
	if len(args) == 4 && args[0] == "resolve" {
		return resolve(args[1], args[2], args[3])
	}
	return fmt.Errorf("usage: crioimage import <root> <runroot> <oci-layout-dir> <name> | resolve <registries.conf> <registries.conf.d> <image>")
}

func importLayout(root, runroot, dir, name string) error {
	store, err := cstorage.GetStore(cstorage.StoreOptions{GraphRoot: root, RunRoot: runroot, GraphDriverName: "overlay"})
	if err != nil {
		return err
	}
	defer store.Shutdown(false)
	src, err := layout.NewReference(dir, "")
	if err != nil {
		return err
	}
	named, err := reference.ParseNormalizedNamed(name)
	if err != nil {
		return err
	}
	dest, err := storage.Transport.NewStoreReference(store, named, "")
	if err != nil {
		return err
	}
	policy, err := signature.NewPolicyContext(&signature.Policy{Default: signature.PolicyRequirements{signature.NewPRInsecureAcceptAnything()}})
	if err != nil {
		return err
	}
	defer policy.Destroy()
	_, err = copy.Image(context.Background(), policy, dest, src, &copy.Options{})
	return err
}

func resolve(conf, dir, image string) error {
	ctx := &types.SystemContext{SystemRegistriesConfPath: conf, SystemRegistriesConfDirPath: dir}
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return err
	}
	registry, err := sysregistriesv2.FindRegistry(ctx, named.String())
	if err != nil {
		return err
	}
	if registry == nil {
		fmt.Printf("%s insecure=false %s\n", reference.Domain(named), named.String())
		return nil
	}
	sources, err := registry.PullSourcesFromReference(named)
	if err != nil {
		return err
	}
	for _, source := range sources {
		fmt.Printf("%s insecure=%t %s\n", source.Endpoint.Location, source.Endpoint.Insecure, source.Reference.String())
	}
	return nil
}
