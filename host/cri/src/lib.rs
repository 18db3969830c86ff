//! What the kubelet does to a node's container runtime, for the tests and
//! the bench: a CRI client ([`Cri`], `runtime.v1` over containerd's unix
//! socket) and a containerd of the caller's own ([`Containerd`]: its own
//! root, state, socket, CNI dirs and an offline pause image, in a network
//! namespace standing in for the node). Nothing of the machine's own
//! containerd is used or changed.

pub mod proto;

mod containerd;

pub use containerd::{pause_image, Containerd, PAUSE_REF};

use std::path::Path;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::proto::*;

const SERVICE: &str = "/runtime.v1.RuntimeService/";

/// A CRI client. One HTTP/2 connection, shared by every thread that calls
/// it (the kubelet starts pods in parallel over one connection too).
pub struct Cri {
    rt: tokio::runtime::Runtime,
    channel: Channel,
    timeout: Duration,
    /// The pods' cgroup parent (the kubelet's is `kubepods`); empty for
    /// containerd's default.
    cgroup_parent: String,
}

impl Cri {
    pub fn connect(sock: &Path) -> Result<Cri, String> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("tokio: {e}"))?;
        let sock = sock.to_path_buf();
        let shown = sock.display().to_string();
        // The URI is never resolved: the connector dials the socket.
        let channel = rt
            .block_on(async move {
                Endpoint::from_static("http://cri.invalid")
                    .connect_timeout(Duration::from_secs(5))
                    .connect_with_connector(tower::service_fn(move |_: Uri| {
                        let sock = sock.clone();
                        async move {
                            let s = tokio::net::UnixStream::connect(sock).await?;
                            Ok::<_, std::io::Error>(TokioIo::new(s))
                        }
                    }))
                    .await
            })
            .map_err(|e| format!("CRI at {shown}: {e}"))?;
        Ok(Cri {
            rt,
            channel,
            timeout: Duration::from_secs(120),
            cgroup_parent: String::new(),
        })
    }

    fn call<Q, R>(&self, method: &'static str, req: Q) -> Result<R, String>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        let timeout = self.timeout;
        let path = PathAndQuery::try_from(format!("{SERVICE}{method}"))
            .map_err(|e| format!("{method}: {e}"))?;
        self.rt.block_on(async move {
            grpc.ready()
                .await
                .map_err(|e| format!("{method}: not ready: {e}"))?;
            let mut req = tonic::Request::new(req);
            req.set_timeout(timeout);
            let codec = tonic_prost::ProstCodec::<Q, R>::default();
            match tokio::time::timeout(timeout, grpc.unary(req, path, codec)).await {
                Ok(Ok(r)) => Ok(r.into_inner()),
                Ok(Err(s)) => Err(format!("{method}: {:?}: {}", s.code(), s.message())),
                Err(_) => Err(format!("{method}: no answer in {timeout:?}")),
            }
        })
    }

    /// The runtime's conditions, as the kubelet reads them for the node's
    /// Ready condition.
    pub fn status(&self) -> Result<StatusResponse, String> {
        self.call("Status", StatusRequest { verbose: false })
    }

    /// `NetworkReady`, with containerd's reason when it is false.
    pub fn network_ready(&self) -> Result<(bool, String), String> {
        let st = self.status()?;
        let cond = st
            .status
            .unwrap_or_default()
            .conditions
            .into_iter()
            .find(|c| c.r#type == "NetworkReady")
            .ok_or("Status: no NetworkReady condition")?;
        Ok((cond.status, format!("{}: {}", cond.reason, cond.message)))
    }

    /// A pod sandbox as the kubelet asks for one: name, uid, namespace.
    pub fn run_pod(&self, name: &str) -> Result<String, String> {
        self.run_pod_ports(name, Vec::new())
    }

    /// [`Cri::run_pod`] with the pod's host ports (its containers'
    /// `hostPort`s, which the kubelet puts on the sandbox).
    pub fn run_pod_ports(&self, name: &str, ports: Vec<PortMapping>) -> Result<String, String> {
        self.run_pod_with(PodSandboxConfig {
            port_mappings: ports,
            metadata: Some(PodSandboxMetadata {
                name: name.into(),
                uid: format!("{name}-uid"),
                namespace: "default".into(),
                attempt: 0,
            }),
            hostname: name.into(),
            linux: Some(LinuxPodSandboxConfig {
                cgroup_parent: self.cgroup_parent.clone(),
            }),
            ..Default::default()
        })
    }

    pub fn with_cgroup_parent(mut self, parent: &str) -> Cri {
        self.cgroup_parent = parent.into();
        self
    }

    pub fn run_pod_with(&self, config: PodSandboxConfig) -> Result<String, String> {
        let r: RunPodSandboxResponse = self.call(
            "RunPodSandbox",
            RunPodSandboxRequest {
                config: Some(config),
                runtime_handler: String::new(),
            },
        )?;
        Ok(r.pod_sandbox_id)
    }

    pub fn stop_pod(&self, id: &str) -> Result<(), String> {
        let _: Empty = self.call(
            "StopPodSandbox",
            PodSandboxIdRequest {
                pod_sandbox_id: id.into(),
            },
        )?;
        Ok(())
    }

    pub fn remove_pod(&self, id: &str) -> Result<(), String> {
        let _: Empty = self.call(
            "RemovePodSandbox",
            PodSandboxIdRequest {
                pod_sandbox_id: id.into(),
            },
        )?;
        Ok(())
    }

    pub fn pod_status(&self, id: &str) -> Result<PodSandboxStatusResponse, String> {
        self.call(
            "PodSandboxStatus",
            PodSandboxStatusRequest {
                pod_sandbox_id: id.into(),
                verbose: true,
            },
        )
    }

    /// The pod's address, as the CNI result gave it to containerd.
    pub fn pod_ip(&self, id: &str) -> Result<String, String> {
        let st = self.pod_status(id)?;
        st.status
            .and_then(|s| s.network)
            .map(|n| n.ip)
            .filter(|ip| !ip.is_empty())
            .ok_or_else(|| format!("{id}: no pod IP"))
    }

    /// Every address of the pod (a dual-stack pod has one per family).
    pub fn pod_ips(&self, id: &str) -> Result<Vec<String>, String> {
        let net = self
            .pod_status(id)?
            .status
            .and_then(|s| s.network)
            .ok_or_else(|| format!("{id}: no network status"))?;
        Ok(std::iter::once(net.ip)
            .chain(net.additional_ips.into_iter().map(|p| p.ip))
            .filter(|ip| !ip.is_empty())
            .collect())
    }

    /// The pid of the sandbox's pause process (containerd's verbose
    /// status), to enter the pod's network namespace from the node.
    pub fn pod_pid(&self, id: &str) -> Result<u32, String> {
        let st = self.pod_status(id)?;
        let info = st.info.get("info").ok_or("no verbose info")?;
        let v: serde_json::Value =
            serde_json::from_str(info).map_err(|e| format!("verbose info: {e}"))?;
        v["pid"]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok())
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("{id}: no pid in {info}"))
    }

    pub fn list_pods(&self) -> Result<Vec<PodSandbox>, String> {
        let r: ListPodSandboxResponse = self.call("ListPodSandbox", ListPodSandboxRequest {})?;
        Ok(r.items)
    }
}
