//! A small OCI distribution client for `wasm-cni pull` and `push`: HTTP/1.1
//! (hyper) over TCP or TLS (rustls, the system's roots or `--ca-file`), with
//! the registry token flow (a 401's `WWW-Authenticate: Bearer realm=…` is
//! answered with a token from the realm, Basic with the credentials) and
//! redirects for blobs (no credentials to another host).
//!
//! Every reply is read under a size limit and a deadline: a manifest is at
//! most 4 MiB, a blob exactly the size its descriptor states, and nothing is
//! stored before its digest matches. One connection per request; a pull is
//! four requests.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};

mod replies;
use replies::encode;
pub use replies::{describe_error, parse_challenge, Challenge, Url};

use super::auth::{self, Creds};
use super::sign::{self, SigningKey};
use super::trust::{Decision, Policy};
use super::{
    build_artifact, component_interface, parse_config, parse_manifest, ComponentSummary,
    Descriptor, Digest, ImageRef, ImageStore, WasmManifest, INDEX_MEDIA_TYPE, MANIFEST_MEDIA_TYPE,
    MAX_MANIFEST_BYTES,
};

/// How `pull` and `push` reach a registry.
#[derive(Debug, Clone)]
pub struct Options {
    /// Plain HTTP instead of HTTPS (a registry on loopback, a test).
    pub plain_http: bool,
    /// The auth file to use instead of podman's and docker's defaults.
    pub auth_file: Option<PathBuf>,
    /// PEM certificates to trust instead of the system's.
    pub ca_file: Option<PathBuf>,
    /// Each request (connect, send, read the whole reply) ends by then.
    pub timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            plain_http: false,
            auth_file: None,
            ca_file: None,
            timeout: Duration::from_secs(60),
        }
    }
}

/// What `pull` fetched.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The image by digest: what a chain entry names.
    pub pinned: ImageRef,
    pub manifest: WasmManifest,
    pub summary: ComponentSummary,
    /// False when the component was already in the store.
    pub fetched_component: bool,
    /// What the node's trust policy decided, if it has one.
    pub trust: Option<Decision>,
}

/// Error bodies and token replies are small; more is not read.
const SMALL_REPLY: u64 = 1 << 20;

/// `check` is shown the stored component (its blob and digest) before the
/// manifest is stored: `wasm-cni pull` compiles it there, so that a
/// component this host cannot run is refused at pull, not at ADD, and the
/// first ADD finds it compiled.
///
/// With a trust `policy`, the image must pass it before anything of it is
/// fetched beyond its manifest and signatures, and before anything is
/// stored; the signatures that passed are stored with it, so that a load
/// can check them again against the policy of the day.
pub fn pull(
    store: &ImageStore,
    image: &ImageRef,
    opts: &Options,
    policy: Option<&Policy>,
    check: &dyn Fn(&Path, &Digest) -> Result<(), String>,
) -> Result<Pulled, String> {
    runtime()?.block_on(async {
        let mut s = Session::new(image, opts)?;
        let what = format!("manifest of {image}");
        let path = format!(
            "/v2/{}/manifests/{}",
            image.repository,
            image.manifest_reference()
        );
        let accept = format!("{MANIFEST_MEDIA_TYPE}, {INDEX_MEDIA_TYPE}");
        let reply = s
            .send(Method::GET, &path, &[(header::ACCEPT, accept)], None, MAX_MANIFEST_BYTES)
            .await?;
        reply.expect(StatusCode::OK, &what)?;
        let digest = Digest::of(&reply.body);
        match &image.digest {
            Some(want) if *want != digest => {
                return Err(super::ImageError::DigestMismatch {
                    what: format!("{what} as the registry sent it"),
                    expected: want.to_string(),
                    actual: digest.to_string(),
                }
                .to_string())
            }
            Some(_) => {}
            None => {
                // A tag: the digest is what we received; a registry that
                // claims another digest for it is not believed either way.
                if let Some(claimed) = reply.header("docker-content-digest") {
                    if claimed != digest.to_string() {
                        return Err(format!(
                            "{what}: the registry says its digest is {claimed}, the bytes it sent are {digest}"
                        ));
                    }
                }
            }
        }
        let manifest = parse_manifest(&reply.body).map_err(|e| format!("{image}: {e}"))?;
        let (trust, signatures) = match policy {
            Some(policy) => {
                // A signature image that cannot be read is the rule's
                // refusal like any other: its message names the rule.
                let fetched = if policy.wants_signatures(image) {
                    s.signatures(&digest).await
                } else {
                    Ok(Vec::new())
                };
                let decision = policy.decide(image, &digest, &mut || fetched.clone())?;
                (Some(decision), fetched.unwrap_or_default())
            }
            None => (None, Vec::new()),
        };
        let config = s.blob(&manifest.config, "artifact config").await?;
        let summary = parse_config(&config, &manifest).map_err(|e| format!("{image}: {e}"))?;
        let fetched_component = !store.has_blob(&manifest.layer);
        let component = if fetched_component {
            let component = s.blob(&manifest.layer, "component").await?;
            component_interface(&component).map_err(|e| format!("{image}: {e}"))?;
            Some(component)
        } else {
            None
        };
        // Everything fetched and verified: write under the store's lock.
        let mut refused = None;
        store
            .locked(|| {
                if let Some(component) = &component {
                    store.put_blob(&manifest.layer.digest, component)?;
                }
                if let Err(e) = check(&store.blob_path(&manifest.layer.digest), &manifest.layer.digest) {
                    refused = Some(format!("{image}: {e}"));
                    return Ok(());
                }
                store.put_blob(&manifest.config.digest, &config)?;
                if matches!(trust, Some(Decision::Verified { .. })) {
                    store.put_signatures(&digest, &signatures)?;
                }
                // Where it came from, which the policy judges at every load
                // (a config may name it otherwise).
                store.add_provenance(&digest, image)?;
                // The manifest last: once it is there, so is all it names.
                store.put_blob(&digest, &reply.body)?;
                store.record(&image.to_string(), &digest, reply.body.len() as u64)
            })
            .map_err(|e| e.to_string())?;
        if let Some(why) = refused {
            return Err(why);
        }
        Ok(Pulled {
            pinned: image.pinned(digest),
            manifest,
            summary,
            fetched_component,
            trust,
        })
    })
}

/// Publish `component` as `image` (a tag) in the CNCF wasm layout, its
/// config saying it was `created` then; the image by digest on success.
/// With `key`, a signature of it is pushed beside it (`sign.rs`).
pub fn push(
    component: &[u8],
    created: SystemTime,
    image: &ImageRef,
    opts: &Options,
    key: Option<&SigningKey>,
) -> Result<ImageRef, String> {
    if image.digest.is_some() {
        return Err(format!(
            "{image}: push to a tag (REPOSITORY:TAG); the digest is known once pushed"
        ));
    }
    let artifact = build_artifact(component, created).map_err(|e| e.to_string())?;
    runtime()?.block_on(async {
        let mut s = Session::new(image, opts)?;
        for (desc, bytes) in [
            (&artifact.layer, component),
            (&artifact.config_descriptor, artifact.config.as_slice()),
        ] {
            s.upload(image, desc, bytes).await?;
        }
        let digest = artifact.manifest_digest();
        let reply = s
            .put_manifest(
                &image.manifest_reference(),
                artifact.manifest.clone(),
                &format!("pushing the manifest of {image}"),
            )
            .await?;
        if let Some(claimed) = reply.header("docker-content-digest") {
            if claimed != digest.to_string() {
                return Err(format!(
                    "{image}: the registry stored the manifest as {claimed}, we sent {digest}"
                ));
            }
        }
        if let Some(key) = key {
            let payload = sign::payload(image, &digest);
            let signature = key.sign(&payload)?;
            let sig = sign::signature_image(payload, &signature);
            for (desc, bytes) in [
                (&sig.payload_descriptor, sig.payload.as_slice()),
                (&sig.config_descriptor, sig.config.as_slice()),
            ] {
                s.upload(image, desc, bytes).await?;
            }
            s.put_manifest(
                &sign::signature_tag(&digest),
                sig.manifest,
                &format!("pushing the signature of {image}"),
            )
            .await?;
        }
        Ok(image.pinned(digest))
    })
}

/// One GET on a connection of its own, whole within `timeout`, the reply
/// read up to `limit` bytes; no redirect is followed and no credentials are
/// added but `headers`. For the installer's read of the Kubernetes API
/// (HTTPS with the cluster's CA), sharing this client's limits.
pub fn get_once(
    url: &Url,
    ca_file: Option<&Path>,
    headers: &[(header::HeaderName, String)],
    limit: u64,
    timeout: Duration,
) -> Result<Reply, String> {
    let tls = tls_for(url, ca_file)?;
    let origin = url.origin();
    let work = exchange(tls, Method::GET, url, headers, None, limit);
    runtime()?.block_on(within(&origin, timeout, "no complete reply", work))
}

/// `work` within `timeout`, its error prefixed with `origin`; past the
/// deadline, "`origin`: `late` within N ms".
async fn within<T>(
    origin: &str,
    timeout: Duration,
    late: &str,
    work: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    match tokio::time::timeout(timeout, work).await {
        Ok(r) => r.map_err(|e| format!("{origin}: {e}")),
        Err(_) => Err(format!(
            "{origin}: {late} within {} ms",
            timeout.as_millis()
        )),
    }
}

/// The TLS side of a request to `url`, if it is https.
fn tls_for(
    url: &Url,
    ca_file: Option<&Path>,
) -> Result<Option<tokio_rustls::TlsConnector>, String> {
    url.https.then(|| tls_connector(ca_file)).transpose()
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the I/O runtime: {e}"))
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn expect(&self, want: StatusCode, what: &str) -> Result<(), String> {
        if self.status == want || (want == StatusCode::OK && self.status.is_success()) {
            return Ok(());
        }
        Err(format!(
            "{what}: {}",
            describe_error(self.status, &self.body)
        ))
    }
}

struct Session<'a> {
    opts: &'a Options,
    base: Url,
    image: &'a ImageRef,
    creds: Option<Creds>,
    /// The Authorization header the registry accepted (or we hope it will).
    authorization: Option<String>,
    tls: Option<tokio_rustls::TlsConnector>,
}

impl<'a> Session<'a> {
    fn new(image: &'a ImageRef, opts: &'a Options) -> Result<Self, String> {
        let scheme = if opts.plain_http { "http" } else { "https" };
        let base = Url::parse(&format!("{scheme}://{}/", image.api_host()))?;
        let creds = auth::lookup(opts.auth_file.as_deref(), image)?;
        Ok(Session {
            opts,
            base,
            image,
            creds,
            authorization: None,
            tls: None,
        })
    }

    /// A request to the registry, answering one authentication challenge
    /// and following up to five redirects.
    async fn send(
        &mut self,
        method: Method,
        target: &str,
        headers: &[(header::HeaderName, String)],
        body: Option<Vec<u8>>,
        limit: u64,
    ) -> Result<Reply, String> {
        let mut url = self.base.join(target)?;
        self.send_url(method, &mut url, headers, body, limit).await
    }

    async fn send_url(
        &mut self,
        method: Method,
        url: &mut Url,
        headers: &[(header::HeaderName, String)],
        body: Option<Vec<u8>>,
        limit: u64,
    ) -> Result<Reply, String> {
        let mut answered = false;
        let mut redirects = 0;
        loop {
            let ours = url.origin() == self.base.origin();
            let mut h: Vec<(header::HeaderName, String)> = headers.to_vec();
            if let (true, Some(a)) = (ours, &self.authorization) {
                h.push((header::AUTHORIZATION, a.clone()));
            }
            let reply = self
                .exchange(method.clone(), url, &h, body.clone(), limit)
                .await?;
            if reply.status == StatusCode::UNAUTHORIZED && ours && !answered {
                answered = true;
                let challenge = reply
                    .header("www-authenticate")
                    .ok_or_else(|| {
                        format!("{}: 401 without a WWW-Authenticate challenge", url.origin())
                    })?
                    .to_string();
                self.authenticate(&challenge).await?;
                continue;
            }
            if reply.status.is_redirection() && reply.status != StatusCode::NOT_MODIFIED {
                let Some(location) = reply.header("location") else {
                    return Err(format!("{}: a redirect without a Location", url.origin()));
                };
                redirects += 1;
                if redirects > 5 || !(method == Method::GET || method == Method::HEAD) {
                    return Err(format!("{}: too many redirects", self.base.origin()));
                }
                *url = url.join(location)?;
                continue;
            }
            if reply.status == StatusCode::UNAUTHORIZED {
                let who = match &self.creds {
                    Some(c) => format!("the credentials of {} from {} were refused", c.username, c.source),
                    None => format!(
                        "no credentials for {} in the auth files ({}); `podman login {}` or --auth-file",
                        self.image.registry,
                        auth::candidates(self.opts.auth_file.as_deref())
                            .iter()
                            .map(|p| p.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", "),
                        self.image.registry
                    ),
                };
                return Err(format!("{}: unauthorized: {who}", self.image));
            }
            return Ok(reply);
        }
    }

    async fn authenticate(&mut self, challenge: &str) -> Result<(), String> {
        let basic = self.creds.as_ref().map(|c| {
            let raw = format!("{}:{}", c.username, c.password);
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(raw)
            )
        });
        match parse_challenge(challenge).map_err(|e| format!("{}: {e}", self.base.origin()))? {
            Challenge::Basic => {
                // Without credentials the request is sent once more and its
                // 401 reported with where credentials were looked for.
                self.authorization = basic;
            }
            Challenge::Bearer { realm, params } => {
                let mut realm = Url::parse(&realm)
                    .map_err(|e| format!("{}: token realm: {e}", self.base.origin()))?;
                let query: Vec<String> = params
                    .iter()
                    .filter(|(k, _)| k == "service" || k == "scope")
                    .map(|(k, v)| format!("{k}={}", encode(v)))
                    .collect();
                if !query.is_empty() {
                    let sep = if realm.target.contains('?') { '&' } else { '?' };
                    realm.target = format!("{}{sep}{}", realm.target, query.join("&"));
                }
                let mut h = Vec::new();
                // Credentials go to a realm over TLS only (or where the
                // operator chose plain HTTP).
                if let Some(b) = basic.filter(|_| realm.https || self.opts.plain_http) {
                    h.push((header::AUTHORIZATION, b));
                }
                let reply = self
                    .exchange(Method::GET, &realm, &h, None, SMALL_REPLY)
                    .await?;
                reply.expect(StatusCode::OK, &format!("token from {}", realm.origin()))?;
                let v: Value = serde_json::from_slice(&reply.body)
                    .map_err(|e| format!("token from {}: not JSON: {e}", realm.origin()))?;
                let token = ["token", "access_token"]
                    .iter()
                    .find_map(|k| v.get(*k).and_then(Value::as_str))
                    .filter(|t| !t.is_empty() && HeaderValue::from_str(t).is_ok())
                    .ok_or_else(|| format!("token from {}: no usable token", realm.origin()))?;
                self.authorization = Some(format!("Bearer {token}"));
            }
        }
        Ok(())
    }

    /// PUT an OCI image manifest of this session's repository as
    /// `reference` (a tag or a digest); the registry's reply once it
    /// answered 201.
    async fn put_manifest(
        &mut self,
        reference: &str,
        manifest: Vec<u8>,
        what: &str,
    ) -> Result<Reply, String> {
        let path = format!("/v2/{}/manifests/{reference}", self.image.repository);
        let reply = self
            .send(
                Method::PUT,
                &path,
                &[(header::CONTENT_TYPE, MANIFEST_MEDIA_TYPE.into())],
                Some(manifest),
                SMALL_REPLY,
            )
            .await?;
        reply.expect(StatusCode::CREATED, what)?;
        Ok(reply)
    }

    /// The signatures pushed for `manifest` (cosign's tag scheme): each
    /// payload, verified against its descriptor, with its signature. None
    /// when the registry has no signature image for it.
    async fn signatures(&mut self, manifest: &Digest) -> Result<Vec<(Vec<u8>, String)>, String> {
        let tag = sign::signature_tag(manifest);
        let what = format!("signatures of {}@{manifest}", self.image.repository);
        let reply = self
            .send(
                Method::GET,
                &format!("/v2/{}/manifests/{tag}", self.image.repository),
                &[(header::ACCEPT, MANIFEST_MEDIA_TYPE.into())],
                None,
                MAX_MANIFEST_BYTES,
            )
            .await?;
        if reply.status == StatusCode::NOT_FOUND {
            return Ok(Vec::new());
        }
        reply.expect(StatusCode::OK, &what)?;
        let signed =
            sign::parse_signature_manifest(&reply.body).map_err(|e| format!("{what}: {e}"))?;
        let mut out = Vec::with_capacity(signed.len());
        for one in signed {
            let payload = self.blob(&one.payload, "signature payload").await?;
            out.push((payload, one.signature));
        }
        Ok(out)
    }

    /// A blob by its descriptor, verified.
    async fn blob(&mut self, desc: &Descriptor, what: &str) -> Result<Vec<u8>, String> {
        let target = format!("/v2/{}/blobs/{}", self.image.repository, desc.digest);
        let reply = self
            .send(Method::GET, &target, &[], None, desc.size.max(SMALL_REPLY))
            .await?;
        let what = format!("{what} {} of {}", desc.digest, self.image);
        reply.expect(StatusCode::OK, &what)?;
        desc.verify(&what, &reply.body).map_err(|e| e.to_string())?;
        Ok(reply.body)
    }

    /// Upload a blob unless the registry has it (monolithic: one POST for
    /// the session, one PUT with the content and its digest).
    async fn upload(
        &mut self,
        image: &ImageRef,
        desc: &Descriptor,
        bytes: &[u8],
    ) -> Result<(), String> {
        let target = format!("/v2/{}/blobs/{}", image.repository, desc.digest);
        let head = self
            .send(Method::HEAD, &target, &[], None, SMALL_REPLY)
            .await?;
        if head.status == StatusCode::OK {
            return Ok(());
        }
        let what = format!("uploading {} to {image}", desc.digest);
        let start = self
            .send(
                Method::POST,
                &format!("/v2/{}/blobs/uploads/", image.repository),
                &[],
                Some(Vec::new()),
                SMALL_REPLY,
            )
            .await?;
        start.expect(StatusCode::ACCEPTED, &what)?;
        let location = start
            .header("location")
            .ok_or_else(|| format!("{what}: the registry gave no upload Location"))?;
        let mut url = self.base.join(location)?;
        let sep = if url.target.contains('?') { '&' } else { '?' };
        url.target = format!(
            "{}{sep}digest={}",
            url.target,
            encode(&desc.digest.to_string())
        );
        let put = self
            .send_url(
                Method::PUT,
                &mut url,
                &[(header::CONTENT_TYPE, "application/octet-stream".into())],
                Some(bytes.to_vec()),
                SMALL_REPLY,
            )
            .await?;
        put.expect(StatusCode::CREATED, &what)
    }

    fn tls(&mut self) -> Result<tokio_rustls::TlsConnector, String> {
        if let Some(t) = &self.tls {
            return Ok(t.clone());
        }
        let t = tls_connector(self.opts.ca_file.as_deref())?;
        self.tls = Some(t.clone());
        Ok(t)
    }

    /// One request on a connection of its own, whole within the timeout.
    async fn exchange(
        &mut self,
        method: Method,
        url: &Url,
        headers: &[(header::HeaderName, String)],
        body: Option<Vec<u8>>,
        limit: u64,
    ) -> Result<Reply, String> {
        let tls = if url.https { Some(self.tls()?) } else { None };
        let work = exchange(tls, method, url, headers, body, limit);
        within(&url.origin(), self.opts.timeout, "no complete reply", work).await
    }
}

async fn exchange(
    tls: Option<tokio_rustls::TlsConnector>,
    method: Method,
    url: &Url,
    headers: &[(header::HeaderName, String)],
    body: Option<Vec<u8>>,
    limit: u64,
) -> Result<Reply, String> {
    let head = method == Method::HEAD;
    let (parts, mut incoming, driver) = open(tls, method, url, headers, body).await?;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let mut body = Vec::new();
    if !head {
        if declared.is_some_and(|n| n > limit) {
            driver.abort();
            return Err(format!(
                "a reply of {} bytes, over the limit of {limit}",
                declared.unwrap_or(0)
            ));
        }
        while let Some(frame) = incoming.frame().await {
            let frame = frame.map_err(|e| format!("reading the reply: {e}"))?;
            if let Ok(data) = frame.into_data() {
                if (body.len() + data.len()) as u64 > limit {
                    driver.abort();
                    return Err(format!("a reply over the limit of {limit} bytes"));
                }
                body.extend_from_slice(&data);
            }
        }
    }
    driver.abort();
    Ok(Reply {
        status: parts.status,
        headers: parts.headers,
        body,
    })
}

/// Send one request on a connection of its own; the reply's head, its
/// body still to read, and the connection's driver (abort it when done).
async fn open(
    tls: Option<tokio_rustls::TlsConnector>,
    method: Method,
    url: &Url,
    headers: &[(header::HeaderName, String)],
    body: Option<Vec<u8>>,
) -> Result<
    (
        hyper::http::response::Parts,
        hyper::body::Incoming,
        tokio::task::JoinHandle<Result<(), hyper::Error>>,
    ),
    String,
> {
    let tcp = tokio::net::TcpStream::connect((url.connect_host(), url.port))
        .await
        .map_err(|e| format!("connecting: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let io: Box<dyn Io> = match tls {
        None => Box::new(tcp),
        Some(tls) => {
            let name = tokio_rustls::rustls::pki_types::ServerName::try_from(
                url.connect_host().to_string(),
            )
            .map_err(|e| format!("server name: {e}"))?;
            Box::new(
                tls.connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS: {e}"))?,
            )
        }
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("HTTP: {e}"))?;
    let driver = tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(url.target.as_str())
        .header(header::HOST, url.authority())
        .header(
            header::USER_AGENT,
            concat!("wasm-cni/", env!("CARGO_PKG_VERSION")),
        );
    for (name, value) in headers {
        req = req.header(name, value.as_str());
    }
    let req = req
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(|e| format!("request: {e}"))?;
    let res = sender
        .send_request(req)
        .await
        .map_err(|e| format!("HTTP: {e}"))?;
    let (parts, incoming) = res.into_parts();
    Ok((parts, incoming, driver))
}

/// How a [`get_lines`] ended.
pub enum Lines {
    /// A 2xx reply, its body read to the end (or until the reader said
    /// stop): every line went to the reader.
    Read,
    /// Any other status, with the start of its body (for the reason).
    Refused(Reply),
}

/// One GET whose body is a stream of lines (a Kubernetes watch): each line
/// goes to `on_line` as soon as it is complete, until the server ends the
/// body, `on_line` returns false, or `timeout` passes (an error saying
/// so). No line may be longer than `max_line`; no redirect is followed.
pub fn get_lines(
    url: &Url,
    ca_file: Option<&Path>,
    headers: &[(header::HeaderName, String)],
    max_line: usize,
    timeout: Duration,
    on_line: &mut dyn FnMut(&[u8]) -> bool,
) -> Result<Lines, String> {
    let tls = tls_for(url, ca_file)?;
    let origin = url.origin();
    runtime()?.block_on(async {
        let work = async {
            let (parts, mut incoming, driver) = open(tls, Method::GET, url, headers, None).await?;
            if !parts.status.is_success() {
                let mut body = Vec::new();
                while let Some(Ok(frame)) = incoming.frame().await {
                    if let Ok(data) = frame.into_data() {
                        let room = MAX_REFUSAL.saturating_sub(body.len());
                        body.extend_from_slice(&data[..data.len().min(room)]);
                        if room <= data.len() {
                            break;
                        }
                    }
                }
                driver.abort();
                return Ok(Lines::Refused(Reply {
                    status: parts.status,
                    headers: parts.headers,
                    body,
                }));
            }
            let mut line: Vec<u8> = Vec::new();
            while let Some(frame) = incoming.frame().await {
                let frame = frame.map_err(|e| format!("reading the reply: {e}"))?;
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                for chunk in data.split_inclusive(|b| *b == b'\n') {
                    if line.len() + chunk.len() > max_line + 1 {
                        driver.abort();
                        return Err(format!("a line over the limit of {max_line} bytes"));
                    }
                    line.extend_from_slice(chunk);
                    if line.last() == Some(&b'\n') {
                        let go_on = on_line(line.trim_ascii_end());
                        line.clear();
                        if !go_on {
                            driver.abort();
                            return Ok(Lines::Read);
                        }
                    }
                }
            }
            if !line.trim_ascii().is_empty() {
                on_line(line.trim_ascii_end());
            }
            driver.abort();
            Ok(Lines::Read)
        };
        within(&origin, timeout, "the stream did not end", work).await
    })
}

/// What is kept of a refusal's body.
const MAX_REFUSAL: usize = 64 * 1024;

fn tls_connector(ca_file: Option<&Path>) -> Result<tokio_rustls::TlsConnector, String> {
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::CertificateDer;
    use tokio_rustls::rustls::{ClientConfig, RootCertStore};
    let file = ca_file.unwrap_or(Path::new("/etc/ssl/certs/ca-certificates.crt"));
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(file).map_err(|e| {
        format!(
            "{}: {e} (install ca-certificates, or pass --ca-file)",
            file.display()
        )
    })?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("{}: {e}", file.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("{}: {e}", file.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("{}: no certificates", file.display()));
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}
