// Command baseline is a benchmark baseline, not a product: the smallest controller-runtime controller that does
// what local-registry-publisher's benchmarks exercise. It caches Services carrying the registry label (filtered on
// the server), and server-side applies the oldest one's KEP-1755 document to the ConfigMap, the way a Go operator
// would usually be written. benches/publish.rs runs it beside our controller on the same control plane.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

const (
	registryLabel = "local-registry-publisher.io/registry"
	dataKey       = "localRegistryHosting.v1"
)

type publisher struct {
	client.Client
	namespace, name string
}

func (p *publisher) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	var services corev1.ServiceList
	if err := p.List(ctx, &services); err != nil {
		return ctrl.Result{}, err
	}
	if len(services.Items) == 0 {
		return ctrl.Result{}, nil
	}
	sort.Slice(services.Items, func(i, j int) bool {
		a, b := services.Items[i], services.Items[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	service := services.Items[0]
	if len(service.Spec.Ports) == 0 {
		return ctrl.Result{}, nil
	}
	port := service.Spec.Ports[0]
	document := fmt.Sprintf("hostFromClusterNetwork: \"%s.%s.svc.cluster.local:%d\"\n", service.Name, service.Namespace, port.Port)
	if port.NodePort != 0 {
		document = fmt.Sprintf("host: \"localhost:%d\"\nhostFromContainerRuntime: \"localhost:%d\"\n", port.NodePort, port.NodePort) + document
	}
	configMap := corev1apply.ConfigMap(p.name, p.namespace).WithData(map[string]string{dataKey: document})
	return ctrl.Result{}, p.Apply(ctx, configMap, client.FieldOwner("baseline"), client.ForceOwnership)
}

func main() {
	namespace := flag.String("configmap-namespace", "kube-public", "namespace of the published ConfigMap")
	name := flag.String("configmap-name", "local-registry-hosting", "name of the published ConfigMap")
	watchNamespace := flag.String("watch-namespace", "", "watch only this namespace's Services (all when empty)")
	// controller-runtime reads built-in types as protobuf by default; kube-rs has JSON only (kube-rs/kube#725), so
	// the benchmark also measures the same controller reading JSON, to tell the encoding's share from the rest.
	json := flag.Bool("json", false, "read the API server's answers and watch events as JSON instead of protobuf")
	flag.Parse()

	// controller-runtime registers --kubeconfig itself.
	config, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeconfig:", err)
		os.Exit(2)
	}
	if *json {
		config.ContentType = "application/json"
	}
	selector := labels.SelectorFromSet(labels.Set{registryLabel: "true"})
	cacheOptions := cache.Options{ByObject: map[client.Object]cache.ByObject{&corev1.Service{}: {Label: selector}}}
	if *watchNamespace != "" {
		cacheOptions.DefaultNamespaces = map[string]cache.Config{*watchNamespace: {}}
	}
	manager, err := ctrl.NewManager(config, ctrl.Options{
		Cache:                  cacheOptions,
		Metrics:                server.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		os.Exit(1)
	}
	reconciler := &publisher{Client: manager.GetClient(), namespace: *namespace, name: *name}
	if err := ctrl.NewControllerManagedBy(manager).For(&corev1.Service{}).Complete(reconciler); err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		os.Exit(1)
	}
	if err := manager.Start(ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		os.Exit(1)
	}
}
