//! A handle on the cluster lab that `tests/lab/lab.sh` starts: the real
//! kubectl against each cluster, commands inside the lab's pods, and waits.

pub mod check;
pub mod coredns;
pub mod docs;
pub mod feed;
pub mod link;
pub mod migrate;
pub mod rbac;
pub mod tenant;
pub mod transparent;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Writes one line to the real stderr, past the test harness's capture.
pub fn loud(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{message}");
}

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Whether `STRAIT_KEEP_LAB` asks to leave the lab running.
fn keep() -> bool {
    std::env::var("STRAIT_KEEP_LAB").is_ok_and(|v| !v.is_empty() && v != "0")
}

fn state_dir() -> PathBuf {
    PathBuf::from(std::env::var("STRAIT_LAB_DIR").unwrap_or_else(|_| "/tmp/strait-lab".to_owned()))
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/lab/lab.sh")
}

/// The running lab.
pub struct Lab {
    state: PathBuf,
    bin: PathBuf,
    kubectl: PathBuf,
    helm: PathBuf,
}

impl Lab {
    /// Starts the lab, or says loudly why it cannot (and fails under
    /// `CI=true`).
    pub fn start() -> Option<Self> {
        if let Err(why) = can_run() {
            assert!(!ci(), "the cluster lab must run under CI=true: {why}");
            loud(&format!(
                "SKIPPED: the cluster lab tests (tests/lab.rs): {why}"
            ));
            return None;
        }
        let started = Instant::now();
        let output = Command::new("bash")
            .arg(script())
            .arg("up")
            .env("STRAIT_BIN", env!("CARGO_BIN_EXE_strait"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .output()
            .expect("tests/lab/lab.sh runs");
        if !output.status.success() {
            let state = state_dir();
            if !keep() {
                let _ = Command::new("bash").arg(script()).arg("down").status();
            }
            panic!(
                "tests/lab/lab.sh up failed (each component's log is in {}/logs, each pod's in {}/<cluster>/pods; STRAIT_KEEP_LAB=1 keeps them)",
                state.display(),
                state.display()
            );
        }
        loud(&format!(
            "lab: up in {:.1} s",
            started.elapsed().as_secs_f64()
        ));
        let state = state_dir();
        let bin = std::fs::read_to_string(state.join("bin")).expect("the lab names its binaries");
        let bin = PathBuf::from(bin.trim());
        let helm = std::fs::read_to_string(state.join("helm")).expect("the lab names its helm");
        Some(Self {
            kubectl: bin.join("kubectl"),
            helm: PathBuf::from(helm.trim()),
            bin,
            state,
        })
    }

    /// Stops the lab, unless `STRAIT_KEEP_LAB` asks to keep it.
    pub fn stop(&self) {
        if keep() {
            loud("lab: kept running (tests/lab/lab.sh down stops it)");
            return;
        }
        let status = Command::new("bash")
            .arg(script())
            .arg("down")
            .status()
            .expect("tests/lab/lab.sh runs");
        assert!(status.success(), "tests/lab/lab.sh down failed");
    }

    /// Takes down the wall that keeps each cluster's node and pods from the
    /// other clusters' API servers (`tests/lab/lab.sh wall`), until the
    /// guard is dropped: a failed assertion raises it again too.
    pub fn wall_down(&self) -> WallDown {
        assert!(wall("off"), "tests/lab/lab.sh wall off failed");
        WallDown
    }

    /// The folder of the lab's components (tests/lab/build.sh).
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// The helm binary (tests/lab/build-helm.sh).
    pub fn helm(&self) -> PathBuf {
        self.helm.clone()
    }

    pub fn kubeconfig(&self, cluster: &str) -> PathBuf {
        self.state.join(cluster).join("admin.kubeconfig")
    }

    /// The lab's folder: kubeconfigs, audit logs, each component's log
    /// under `logs/`, each pod's under `<cluster>/pods/`.
    pub fn state(&self) -> &Path {
        &self.state
    }

    /// One object's fields, by a kubectl `jsonpath` template.
    pub fn field(&self, cluster: &str, namespace: &str, object: &[&str], jsonpath: &str) -> String {
        let mut args = vec!["-n", namespace, "get"];
        args.extend_from_slice(object);
        let template = format!("jsonpath={jsonpath}");
        args.extend(["-o", template.as_str()]);
        self.kubectl(cluster, &args)
    }

    /// Rewrites `cluster`'s gateway.yaml (ConfigMap
    /// `strait-system/cluster-edge-config`) line by line with `edit`, then
    /// restarts the gateway Deployment and waits for it, as an operator
    /// does.
    pub fn edit_gateway_yaml(&self, cluster: &str, edit: impl FnOnce(Vec<String>) -> Vec<String>) {
        let config = self.field(
            cluster,
            "strait-system",
            &["configmap", "cluster-edge-config"],
            "{.data.gateway\\.yaml}",
        );
        let lines = edit(config.lines().map(str::to_owned).collect());
        let patch = serde_json::json!({"data": {"gateway.yaml": lines.join("\n") + "\n"}});
        let patch = patch.to_string();
        for args in [
            &[
                "patch",
                "configmap",
                "cluster-edge-config",
                "--type=merge",
                "-p",
                &patch,
            ][..],
            &["rollout", "restart", "deployment/cluster-edge"][..],
            &[
                "rollout",
                "status",
                "deployment/cluster-edge",
                "--timeout=180s",
            ][..],
        ] {
            let mut all = vec!["-n", "strait-system"];
            all.extend_from_slice(args);
            self.kubectl(cluster, &all);
        }
    }

    /// Runs kubectl as the cluster's admin; its stdout, or its stderr as
    /// the error.
    pub fn try_kubectl(&self, cluster: &str, args: &[&str]) -> Result<String, String> {
        let output = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(self.kubeconfig(cluster))
            .args(args)
            .output()
            .map_err(|e| format!("kubectl: {e}"))?;
        text(output)
    }

    pub fn kubectl(&self, cluster: &str, args: &[&str]) -> String {
        self.try_kubectl(cluster, args)
            .unwrap_or_else(|e| panic!("kubectl {args:?} in {cluster}: {e}"))
    }

    /// `kubectl apply -f -` of `yaml`.
    pub fn apply(&self, cluster: &str, yaml: &str) {
        self.stdin_kubectl(cluster, &["apply", "-f", "-"], yaml);
    }

    fn stdin_kubectl(&self, cluster: &str, args: &[&str], input: &str) {
        let mut child = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(self.kubeconfig(cluster))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("kubectl reads the manifest");
        let output = child.wait_with_output().expect("kubectl ends");
        if let Err(e) = text(output) {
            panic!("kubectl {args:?} in {cluster}: {e}\n{input}");
        }
    }

    /// `kubectl replace -f -` of `json`.
    pub fn replace(&self, cluster: &str, json: &str) {
        self.stdin_kubectl(cluster, &["replace", "-f", "-"], json);
    }

    /// `kubectl apply -f` of a file of the repository.
    pub fn apply_file(&self, cluster: &str, file: &str) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        self.kubectl(cluster, &["apply", "-f", path.to_str().expect("a path")]);
    }

    /// The network namespace (`/run/netns/…`) of a pod of the lab.
    #[allow(dead_code)] // benches/lab_control_plane.rs
    pub fn pod_netns(&self, cluster: &str, namespace: &str, pod: &str) -> String {
        self.pod_file(cluster, namespace, pod, "netns")
            .trim()
            .to_owned()
    }

    /// The process id of a pod's container.
    #[allow(dead_code)] // benches/lab_control_plane.rs
    pub fn pod_pid(&self, cluster: &str, namespace: &str, pod: &str) -> u32 {
        self.pod_file(cluster, namespace, pod, "pid")
            .trim()
            .parse()
            .expect("a pid")
    }

    fn pod_file(&self, cluster: &str, namespace: &str, pod: &str, file: &str) -> String {
        let wanted = format!("{namespace}/{pod}");
        let folder = self
            .pod_folders(cluster)
            .into_iter()
            .find_map(|(name, folder)| (name == wanted).then_some(folder))
            .unwrap_or_else(|| panic!("no pod {wanted} runs in {cluster}"));
        std::fs::read_to_string(folder.join(file)).unwrap_or_default()
    }

    /// Each pod the cluster's kubelet stand-in runs: its `namespace/name`
    /// and its folder.
    fn pod_folders(&self, cluster: &str) -> Vec<(String, PathBuf)> {
        let pods = self.state.join(cluster).join("pods");
        std::fs::read_dir(&pods)
            .expect("the lab's pods")
            .flatten()
            .map(|entry| {
                let name = std::fs::read_to_string(entry.path().join("name")).unwrap_or_default();
                (name.trim().to_owned(), entry.path())
            })
            .collect()
    }

    /// The names of the pods in `namespace` whose names start with `prefix`.
    pub fn pods(&self, cluster: &str, namespace: &str, prefix: &str) -> Vec<String> {
        self.kubectl(cluster, &["-n", namespace, "get", "pods", "-o", "name"])
            .lines()
            .filter_map(|l| l.strip_prefix("pod/"))
            .filter(|name| name.starts_with(prefix))
            .map(str::to_owned)
            .collect()
    }

    /// The logs of the pods in `namespace` whose names start with
    /// `prefix`, one after another.
    pub fn pod_logs(&self, cluster: &str, namespace: &str, prefix: &str) -> String {
        let wanted = format!("{namespace}/{prefix}");
        self.pod_folders(cluster)
            .into_iter()
            .filter(|(name, _)| name.starts_with(&wanted))
            .map(|(_, folder)| std::fs::read_to_string(folder.join("log")).unwrap_or_default())
            .collect()
    }

    /// Runs `command` inside a pod of the lab (its network namespace and
    /// its resolv.conf), as `kubectl exec` would.
    pub fn exec(
        &self,
        cluster: &str,
        namespace: &str,
        pod: &str,
        command: &[&str],
    ) -> Result<String, String> {
        let output = Command::new("bash")
            .arg(script())
            .args(["exec", cluster, namespace, pod])
            .args(command)
            .output()
            .map_err(|e| format!("lab.sh exec: {e}"))?;
        text(output)
    }

    /// `curl` from a pod: the answer's body, or why there was none.
    pub fn curl(
        &self,
        cluster: &str,
        namespace: &str,
        pod: &str,
        url: &str,
    ) -> Result<String, String> {
        self.exec(
            cluster,
            namespace,
            pod,
            &["curl", "-sS", "--fail", "-m", "5", url],
        )
        .map(|body| body.trim().to_owned())
    }

    /// Creates the namespace in every cluster.
    pub fn namespace(&self, name: &str) {
        for cluster in CLUSTERS {
            self.apply(
                cluster,
                &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n"),
            );
        }
    }

    /// A pod that only waits, to run commands in.
    pub fn client_pod(&self, cluster: &str, namespace: &str) -> &'static str {
        self.apply(
            cluster,
            &format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: client, namespace: {namespace}}}\n\
                 spec:\n  containers: [{{name: client, image: lab/sleep}}]\n"
            ),
        );
        wait_until(&format!("{cluster}'s client pod runs"), 60, || {
            self.kubectl(
                cluster,
                &[
                    "-n",
                    namespace,
                    "get",
                    "pod",
                    "client",
                    "-o",
                    "jsonpath={.status.phase}",
                ],
            ) == "Running"
        });
        "client"
    }

    /// A Deployment of `replicas` echo pods (each answers with its name and
    /// address) and its Service with `ports` (port → the pods' 8080),
    /// exported when `export`.
    pub fn echo_service(
        &self,
        cluster: &str,
        namespace: &str,
        name: &str,
        replicas: u32,
        ports: &[u16],
    ) {
        let ports: String = ports
            .iter()
            .map(|p| format!("  - {{name: p{p}, port: {p}, targetPort: 8080}}\n"))
            .collect();
        self.apply(
            cluster,
            &format!(
                "{}---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  selector: {{app: {name}}}
  ports:
{ports}---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {{name: {name}, namespace: {namespace}}}
",
                echo_deployment(namespace, name, replicas)
            ),
        );
    }

    /// A headless Service `db` of two echo pods with hostnames (`db-0`,
    /// `db-1`) on port 8080, exported.
    pub fn headless_db(&self, cluster: &str, namespace: &str) {
        let pods: String = ["db-0", "db-1"]
            .iter()
            .map(|name| {
                format!(
                    "apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}, labels: {{app: db}}}}
spec:
  hostname: {name}
  subdomain: db
  containers:
  - name: echo
    image: lab/http-echo
    ports: [{{containerPort: 8080, name: http}}]
    readinessProbe: {{httpGet: {{port: http, path: /}}}}
---
"
                )
            })
            .collect();
        self.apply(
            cluster,
            &format!(
                "{pods}apiVersion: v1
kind: Service
metadata: {{name: db, namespace: {namespace}}}
spec:
  clusterIP: None
  selector: {{app: db}}
  ports: [{{name: http, port: 8080}}]
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {{name: db, namespace: {namespace}}}
"
            ),
        );
    }

    /// The addresses of the cluster's ready pods whose names start with
    /// `prefix`, in `namespace`.
    pub fn pod_ips(&self, cluster: &str, namespace: &str, prefix: &str) -> Vec<String> {
        let listing = self.kubectl(
            cluster,
            &[
                "-n",
                namespace,
                "get",
                "pods",
                "-o",
                "jsonpath={range .items[*]}{.metadata.name} {.status.podIP}{\"\\n\"}{end}",
            ],
        );
        listing
            .lines()
            .filter_map(|line| line.split_once(' '))
            .filter(|(name, ip)| name.starts_with(prefix) && !ip.is_empty())
            .map(|(_, ip)| ip.to_owned())
            .collect()
    }

    /// The request log of a pod (what the echo server printed: one line per
    /// request, starting with the address that dialled it).
    pub fn pod_log(&self, cluster: &str, namespace: &str, pod: &str) -> String {
        self.pod_file(cluster, namespace, pod, "log")
    }
}

pub const CLUSTERS: [&str; 3] = ["c1", "c2", "c3"];

/// A Deployment of `replicas` echo pods labelled `app: <name>`, each
/// answering `GET /` on port 8080 with its name and address.
/// The API wall down while it lives (see [`Lab::wall_down`]).
pub struct WallDown;

impl Drop for WallDown {
    fn drop(&mut self) {
        // It may run while a failure unwinds: said, not asserted.
        if !wall("on") {
            eprintln!("tests/lab/lab.sh wall on failed: the API servers are not walled off");
        }
    }
}

fn wall(verb: &str) -> bool {
    Command::new("bash")
        .arg(script())
        .args(["wall", verb])
        .status()
        .is_ok_and(|status| status.success())
}

pub fn echo_deployment(namespace: &str, name: &str, replicas: u32) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
      - name: echo
        image: lab/http-echo
        ports: [{{containerPort: 8080, name: http}}]
        readinessProbe: {{httpGet: {{port: http, path: /}}}}
"
    )
}

fn text(output: Output) -> Result<String, String> {
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "{}: {}{}",
            output.status,
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout)
        ))
    }
}

/// Polls `condition` every half second for up to `seconds`; panics naming
/// `what` when it never holds.
pub fn wait_until(what: &str, seconds: u64, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        if condition() {
            return;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    panic!("timed out after {seconds} s waiting until {what}");
}

fn can_run() -> Result<(), String> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|uids| uids.split_whitespace().nth(1))
        .unwrap_or_default();
    if euid != "0" {
        return Err(format!("not root (effective uid {euid})"));
    }
    for tool in [
        "ip", "iptables", "openssl", "jq", "curl", "go", "python3", "nsenter",
    ] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Err(format!("`{tool}` is not installed"));
        }
    }
    Ok(())
}
