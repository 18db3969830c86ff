//! The messages of `runtime.v1.RuntimeService` (k8s.io/cri-api, api.proto)
//! that the kubelet's pod-sandbox lifecycle sends, written by hand with the
//! upstream field numbers. Fields left out are skipped on decode by prost,
//! as protobuf allows, so containerd's fuller replies still decode.

use std::collections::HashMap;

#[derive(Clone, PartialEq, prost::Message)]
pub struct StatusRequest {
    #[prost(bool, tag = "1")]
    pub verbose: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StatusResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<RuntimeStatus>,
    #[prost(map = "string, string", tag = "2")]
    pub info: HashMap<String, String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RuntimeStatus {
    #[prost(message, repeated, tag = "1")]
    pub conditions: Vec<RuntimeCondition>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RuntimeCondition {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(bool, tag = "2")]
    pub status: bool,
    #[prost(string, tag = "3")]
    pub reason: String,
    #[prost(string, tag = "4")]
    pub message: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub uid: String,
    #[prost(string, tag = "3")]
    pub namespace: String,
    #[prost(uint32, tag = "4")]
    pub attempt: u32,
}

/// `Protocol`: TCP = 0, UDP = 1, SCTP = 2.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PortMapping {
    #[prost(int32, tag = "1")]
    pub protocol: i32,
    #[prost(int32, tag = "2")]
    pub container_port: i32,
    #[prost(int32, tag = "3")]
    pub host_port: i32,
    #[prost(string, tag = "4")]
    pub host_ip: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxPodSandboxConfig {
    #[prost(string, tag = "1")]
    pub cgroup_parent: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxConfig {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<PodSandboxMetadata>,
    #[prost(string, tag = "2")]
    pub hostname: String,
    #[prost(string, tag = "3")]
    pub log_directory: String,
    #[prost(message, repeated, tag = "5")]
    pub port_mappings: Vec<PortMapping>,
    #[prost(map = "string, string", tag = "6")]
    pub labels: HashMap<String, String>,
    #[prost(map = "string, string", tag = "7")]
    pub annotations: HashMap<String, String>,
    #[prost(message, optional, tag = "8")]
    pub linux: Option<LinuxPodSandboxConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxRequest {
    #[prost(message, optional, tag = "1")]
    pub config: Option<PodSandboxConfig>,
    #[prost(string, tag = "2")]
    pub runtime_handler: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxResponse {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxIdRequest {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxStatusRequest {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
    #[prost(bool, tag = "2")]
    pub verbose: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxStatusResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<PodSandboxStatus>,
    #[prost(map = "string, string", tag = "2")]
    pub info: HashMap<String, String>,
}

/// `PodSandboxState`: SANDBOX_READY = 0, SANDBOX_NOTREADY = 1.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxStatus {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(message, optional, tag = "2")]
    pub metadata: Option<PodSandboxMetadata>,
    #[prost(int32, tag = "3")]
    pub state: i32,
    #[prost(int64, tag = "4")]
    pub created_at: i64,
    #[prost(message, optional, tag = "5")]
    pub network: Option<PodSandboxNetworkStatus>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxNetworkStatus {
    #[prost(string, tag = "1")]
    pub ip: String,
    #[prost(message, repeated, tag = "2")]
    pub additional_ips: Vec<PodIp>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodIp {
    #[prost(string, tag = "1")]
    pub ip: String,
}

/// With no filter: every sandbox.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodSandboxRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodSandboxResponse {
    #[prost(message, repeated, tag = "1")]
    pub items: Vec<PodSandbox>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandbox {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(message, optional, tag = "2")]
    pub metadata: Option<PodSandboxMetadata>,
    #[prost(int32, tag = "3")]
    pub state: i32,
}
