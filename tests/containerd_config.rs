//! What differs between containerd releases, proven on a real node running each (`LRP_CONTAINERD`): a registry
//! `config_path` that is a list naming the agent's directory. containerd 1.7 and 2.0 split it and read the agent's
//! files; 2.1 and later pull through the transfer service, which takes the list as one directory name
//! (containerd#12808), so a pull of the registry's ClusterIP goes to HTTPS and fails, and the agent says why. Its own
//! control plane: it restarts the node's containerd with that config, which the other real-node tests do not expect.

mod support;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use serde_json::json;
use testbed::ControlPlane;

use support::agent::{SOON, own_image, push, values, wait_doctor, wait_file};
use support::{apply_in, cluster_ip, wait_until};

fn plane() -> &'static ControlPlane {
    ControlPlane::shared_with_real_node()
}

async fn phase(client: &Client, ns: &str, pod: &str) -> String {
    let pod = Api::<Pod>::namespaced(client.clone(), ns).get_opt(pod).await.ok().flatten();
    pod.and_then(|p| p.status?.phase).unwrap_or_default()
}

/// Why the pod's container waits (the kubelet's words for a failed pull), once it names one of `needles`.
async fn waiting_for(client: &Client, ns: &str, pod: &str, needles: &[&str]) -> String {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let found = wait_until(SOON, || async {
        let pod = pods.get_opt(pod).await.ok()??;
        let statuses = pod.status?.container_statuses?;
        let message = statuses.first()?.state.as_ref()?.waiting.as_ref()?.message.clone()?;
        needles.iter().any(|n| message.contains(n)).then_some(message)
    })
    .await;
    found.unwrap_or_else(|| panic!("pod {pod} never waited with any of {needles:?}"))
}

#[tokio::test]
async fn a_config_path_list_naming_the_agents_directory_is_read_by_1_7_and_taken_as_one_name_from_2_1() {
    let plane = plane();
    let node = plane.real_node().expect("the real node");
    let client = plane.client().await.expect("admin client");
    // The list an admin might write to keep Docker's directory too: the agent's is its second entry.
    let ours = node.hosts_dir_on_node();
    let list = format!("/etc/docker/certs.d:{ours}");
    plane
        .reconfigure_containerd(|config| {
            config.replace(&format!("config_path = \"{ours}\""), &format!("config_path = \"{list}\""))
        })
        .await
        .expect("containerd restarted with a config_path list");
    node.import(&support::controller_image()).expect("import the controller image");
    let ns = plane.namespace(&client, "cfglist").await.expect("namespace");
    support::agent::registry(plane, &client, &ns, node).await;
    support::agent::helm(plane, "install", "cfglist", &ns, &values(&ns, node, &[]));
    let address = format!("{}:5000", cluster_ip(&client, &ns, "registry").await);
    wait_file(node, &address, true, "agent on").await;

    // Read, our file sends the pull to the registry over HTTP and the pod runs; unread, containerd tries HTTPS and
    // the plain-HTTP registry's answer fails it.
    let image = format!("{address}/cfglist/app:1");
    push(plane, Some(node), &own_image(plane, "cfglist"), &image, None);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pull"},
        "spec": {"containers": [{"name": "app", "image": image}]}});
    apply_in(&client, &ns, pod).await;
    let https = "server gave HTTP response to HTTPS client";
    let release = node.containerd_release().minor.clone();
    if release.starts_with("1.") {
        let running = wait_until(SOON, || async { (phase(&client, &ns, "pull").await == "Running").then_some(()) });
        assert!(running.await.is_some(), "containerd {release} splits the list and pulls through our file");
        let report = wait_doctor(plane, &ns, |r| r.contains(&format!("node {}: configured by", node.name()))).await;
        assert!(!report.contains("one directory name"), "{report}");
    } else {
        let said = waiting_for(&client, &ns, "pull", &[https]).await;
        assert!(said.contains(https), "containerd {release} takes the list as one name and reads nothing: {said}");
        let report = wait_doctor(plane, &ns, |r| r.contains("ConfigPathMismatch: ")).await;
        let told = format!("a list that containerd {release} takes as one directory name");
        assert!(report.contains(&told) && report.contains("containerd#12808"), "{report}");
    }
    support::agent::helm_uninstall(plane, "cfglist", &ns);
    wait_file(node, &address, false, "after uninstall").await;
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}
