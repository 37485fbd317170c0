//! What a namespace with `edit` cannot do to every node's pulls.

use super::*;

#[tokio::test]
async fn a_namespace_with_edit_cannot_redirect_what_every_node_pulls_from_a_public_registry_unless_the_admin_allows_it()
{
    let plane = plane();
    let client = plane.client().await.expect("admin client");
    images();
    let ns = plane.namespace(&client, "trust").await.expect("namespace");
    let tenant_ns = plane.namespace(&client, "trust-tenant").await.expect("namespace");
    let tenant = support::edit_only_client(&client, plane.kubeconfig(), &tenant_ns).await;

    // What a user holding only `edit` in an allowed namespace can write: a registry whose Service names
    // registry.k8s.io and quay.io as where pods and tools find it.
    apply_in(&tenant, &tenant_ns, registry_deployment()).await;
    let hijack = registry_service(
        &ns,
        json!({"local-registry-publisher.io/host": "quay.io",
        "local-registry-publisher.io/host-from-container-runtime": "registry.k8s.io"}),
    );
    apply_in(&tenant, &tenant_ns, hijack).await;
    helm_install(
        "trust",
        &ns,
        &tenant_release_values(&ns, &tenant_ns, &[]).iter().map(String::as_str).collect::<Vec<_>>(),
    );
    // Naming the cluster's registry is what the namespace was allowed: all of it is published.
    wait_published(&client, &ns, "hosting", "the tenant's registry", |d| {
        d.host.as_deref() == Some("quay.io") && d.host_from_container_runtime.as_deref() == Some("registry.k8s.io")
    })
    .await;
    let ip = cluster_ip(&client, &tenant_ns, "registry").await;
    let own = format!("{ip}:5000");

    // Its own ClusterIP gets the node's file; the public names get none, and the refusal is told on its Service,
    // in the controller's metrics and by doctor.
    wait_node_file(&own, "the registry's own address", |t| t.is_some()).await;
    let told = wait_event_note(&client, &tenant_ns, "registry", "AddressNotAllowed").await;
    assert!(told.contains("quay.io does not name this Service alone"), "{told}");
    assert!(told.contains("registry.k8s.io does not name this Service alone"), "{told}");
    assert!(told.contains("nodeAgent.allowedAddresses"), "{told}");
    for public in ["quay.io", "registry.k8s.io"] {
        assert!(!node().hosts_dir().join(public).exists(), "a node file for {public} was written");
    }
    let refused = "local_registry_publisher_node_addresses_refused 2\n";
    wait_pod_metrics(&client, &ns, "controller", |text| text.contains(refused)).await;
    // It exits 4 all the same: the published host, quay.io, does not resolve on this machine.
    let report = wait_doctor(&ns, SOMETHING_WRONG, |r| {
        r.contains("registry.k8s.io is published but no node is configured to pull it")
    })
    .await;
    assert!(report.contains("quay.io is published but no node is configured to pull it"), "{report}");
    // A refusal is the admin's rule at work: the node section is not what is wrong.
    let summary = report.rsplit("== Summary").next().unwrap_or_default();
    assert!(!summary.contains("Node pulls"), "{report}");
    // Not a fault, but not done either: the summary names each such address on a line of its own.
    for public in ["quay.io", "registry.k8s.io"] {
        let line = format!("\n  not done: {public} gets no node file: it does not name this Service alone");
        assert!(summary.contains(&line), "{report}");
    }

    // Listed by the cluster admin, both are redirected to the tenant's registry on every node.
    let allowed = ["nodeAgent.allowedAddresses={registry.k8s.io,quay.io}".to_string()];
    helm_upgrade("trust", &ns, &tenant_release_values(&ns, &tenant_ns, &allowed));
    for public in ["quay.io", "registry.k8s.io"] {
        let (text, _) = wait_node_file(public, "allowed by the admin", |t| t.is_some()).await;
        assert!(text.unwrap_or_default().contains(&format!("[host.\"http://{own}\"]")));
    }
    wait_pod_metrics(&client, &ns, "controller", |text| text.contains("node_addresses_refused 0\n")).await;
    helm_uninstall("trust", &ns);
    for address in ["quay.io", "registry.k8s.io", own.as_str()] {
        wait_node_file(address, "after uninstall", |t| t.is_none()).await;
    }
    for ns in [&ns, &tenant_ns] {
        plane.delete_namespace(&client, ns).await.expect("delete namespace");
    }
}
