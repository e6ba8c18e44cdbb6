//! Live reload of the key material: a [`ReloadingTls`] holds the current
//! [`TlsMaterial`] and swaps in a new one when the files' contents change and
//! the new files are valid, keeping the old material otherwise.
//!
//! Kubernetes updates a secret volume by swapping a `..data` symlink, which
//! leaves the visible files' mtimes meaningless, so changes are detected by
//! comparing contents. New handshakes use [`ReloadingTls::current`];
//! established connections keep the configuration they were made with, and
//! the tunnel server checks their peers again at every change
//! ([`ReloadingTls::changes`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use super::TlsError;
use super::config::{SecretFiles, SecretPaths, TlsMaterial};
use super::trust::PeerAuthority;

/// Key material that follows its files.
pub struct ReloadingTls {
    dir: PathBuf,
    paths: SecretPaths,
    current: ArcSwap<TlsMaterial>,
    /// The contents last looked at, good or bad: only a change is acted on.
    seen: Mutex<SecretFiles>,
    /// The contents `current` was built from, and the peers' recorded CAs
    /// beside them: a change of either builds from both.
    built: Mutex<(SecretFiles, Vec<PeerAuthority>)>,
    /// Bumped at every swap: live connections check their peer again.
    generation: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for ReloadingTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingTls")
            .field("dir", &self.dir)
            .field("current", &self.current.load())
            .finish_non_exhaustive()
    }
}

impl ReloadingTls {
    /// Loads the material from `dir` (see [`TlsMaterial::load`]); fails if it is invalid.
    pub fn load(dir: &Path) -> Result<ReloadingTls, TlsError> {
        let paths = SecretPaths::in_dir(dir);
        let files = paths.read();
        let material = TlsMaterial::from_files(&paths, &files, &[])?;
        Ok(ReloadingTls {
            dir: dir.to_owned(),
            paths,
            current: ArcSwap::from_pointee(material),
            seen: Mutex::new(files.clone()),
            built: Mutex::new((files, Vec::new())),
            generation: tokio::sync::watch::Sender::new(0),
        })
    }

    /// The directory the material is read from.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The material to use for a new handshake.
    pub fn current(&self) -> Arc<TlsMaterial> {
        self.current.load_full()
    }

    /// Changes whenever new material is swapped in (a renewed certificate,
    /// another CA bundle, a revocation list): connections made with the
    /// old one check their peer against the new.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Reads the files once. Returns `Ok(true)` when their contents changed
    /// and the new material was swapped in, `Ok(false)` when they did not
    /// change (including when they are the same invalid contents as last
    /// time), and the error when they changed to something invalid, in which
    /// case the current material is kept.
    pub fn reload_now(&self) -> Result<bool, TlsError> {
        let files = self.paths.read();
        {
            let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            if *seen == files {
                return Ok(false);
            }
            *seen = files.clone();
        }
        let mut built = self.built.lock().unwrap_or_else(PoisonError::into_inner);
        let material = TlsMaterial::from_files(&self.paths, &files, &built.1)?;
        built.0 = files;
        self.swap(material);
        Ok(true)
    }

    /// Trusts `peers`' recorded CAs (each for its own cluster alone) beside
    /// `ca.crt`, in place of those set before. Returns whether they
    /// changed; the material built from the last good files otherwise
    /// stays as it was.
    pub fn set_peer_authorities(&self, peers: Vec<PeerAuthority>) -> Result<bool, TlsError> {
        let mut built = self.built.lock().unwrap_or_else(PoisonError::into_inner);
        if built.1 == peers {
            return Ok(false);
        }
        let material = TlsMaterial::from_files(&self.paths, &built.0, &peers)?;
        built.1 = peers;
        self.swap(material);
        Ok(true)
    }

    fn swap(&self, material: TlsMaterial) {
        self.current.store(Arc::new(material));
        self.generation.send_modify(|generation| *generation += 1);
    }

    /// Polls the files every `interval` on a blocking thread, swapping in
    /// valid changes (logged at info) and warning once per invalid change.
    /// The task ends when the last other reference to `self` is dropped.
    pub fn spawn_watcher(self: &Arc<Self>, interval: Duration) -> JoinHandle<()> {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                let Some(this) = weak.upgrade() else {
                    return;
                };
                let dir = this.dir.clone();
                match tokio::task::spawn_blocking(move || this.reload_now()).await {
                    Ok(Ok(true)) => {
                        let identity = weak.upgrade().map(|t| t.current().identity().uri());
                        tracing::info!(
                            dir = %dir.display(),
                            identity = identity.as_deref().unwrap_or("?"),
                            "reloaded tls material"
                        );
                    }
                    Ok(Ok(false)) => {}
                    Ok(Err(error)) => tracing::warn!(
                        dir = %dir.display(),
                        %error,
                        "new tls material refused; keeping the current one"
                    ),
                    Err(error) => tracing::warn!(%error, "tls reload task failed"),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::model::ClusterId;
    use crate::tls::generate::{CA_FILE, CERT_FILE, KEY_FILE, generate_ca, generate_leaf};

    fn write(dir: &Path, cert: &str, key: &str, ca: &str) {
        fs::write(dir.join(CERT_FILE), cert).expect("write cert");
        fs::write(dir.join(KEY_FILE), key).expect("write key");
        fs::write(dir.join(CA_FILE), ca).expect("write ca");
    }

    fn cluster(id: &str) -> ClusterId {
        ClusterId::new(id).expect("valid cluster id")
    }

    #[test]
    fn reload_swaps_on_good_files_and_keeps_the_old_on_bad_ones() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = generate_ca("set").expect("ca");
        let c1 = generate_leaf(&ca, &cluster("c1")).expect("leaf");
        write(dir.path(), &c1.cert_pem, &c1.key_pem, &ca.cert_pem());
        let tls = ReloadingTls::load(dir.path()).expect("load");
        assert_eq!(tls.current().identity(), &c1.identity);
        assert!(!tls.reload_now().expect("unchanged"));

        // The same cluster's renewed certificate, and another cluster's.
        let renewed = generate_leaf(&ca, &cluster("c1")).expect("leaf");
        write(
            dir.path(),
            &renewed.cert_pem,
            &renewed.key_pem,
            &ca.cert_pem(),
        );
        assert!(tls.reload_now().expect("renewed"));
        let c2 = generate_leaf(&ca, &cluster("c2")).expect("leaf");
        write(dir.path(), &c2.cert_pem, &c2.key_pem, &ca.cert_pem());
        assert!(tls.reload_now().expect("swapped"));
        assert_eq!(tls.current().identity(), &c2.identity);

        // A key that does not match: refused once, then ignored, old kept.
        let c3 = generate_leaf(&ca, &cluster("c3")).expect("leaf");
        write(dir.path(), &c3.cert_pem, &c2.key_pem, &ca.cert_pem());
        let err = tls.reload_now().expect_err("mismatched key");
        assert!(err.to_string().contains("tls.key"), "{err}");
        assert!(!tls.reload_now().expect("same bad contents are not retried"));
        assert_eq!(tls.current().identity(), &c2.identity);

        // A missing file is refused too; fixing the files recovers.
        fs::remove_file(dir.path().join(CA_FILE)).expect("remove");
        let err = tls.reload_now().expect_err("missing ca");
        assert!(err.to_string().contains("ca.crt: missing"), "{err}");
        assert_eq!(tls.current().identity(), &c2.identity);
        write(dir.path(), &c3.cert_pem, &c3.key_pem, &ca.cert_pem());
        assert!(tls.reload_now().expect("fixed"));
        assert_eq!(tls.current().identity(), &c3.identity);
    }

    #[test]
    fn a_peers_recorded_ca_is_trusted_for_its_own_cluster_alone() {
        use crate::tls::generate::generate_cluster_ca;
        use rustls_pki_types::CertificateDer;
        use rustls_pki_types::pem::PemObject;

        let der = |pem: &str| CertificateDer::from_pem_slice(pem.as_bytes()).expect("pem");
        let dir = tempfile::tempdir().expect("tempdir");
        let c1_ca = generate_cluster_ca("set", &cluster("c1")).expect("ca");
        let c1 = generate_leaf(&c1_ca, &cluster("c1")).expect("leaf");
        write(dir.path(), &c1.cert_pem, &c1.key_pem, &c1_ca.cert_pem());
        let tls = ReloadingTls::load(dir.path()).expect("load");
        let c3_ca = generate_cluster_ca("set", &cluster("c3")).expect("ca");
        let c3 = der(&generate_leaf(&c3_ca, &cluster("c3"))
            .expect("leaf")
            .cert_pem);
        assert!(
            tls.current().still_trusts(&c3).is_err(),
            "ca.crt holds c1's CA only"
        );

        let recorded = |cluster_id: &str, ca: &crate::tls::CertificateAuthority| PeerAuthority {
            cluster: cluster(cluster_id),
            certificate: der(&ca.cert_pem()),
        };
        assert!(
            tls.set_peer_authorities(vec![recorded("c3", &c3_ca)])
                .expect("built")
        );
        assert!(tls.current().still_trusts(&c3).is_ok());
        assert!(
            !tls.set_peer_authorities(vec![recorded("c3", &c3_ca)])
                .expect("same")
        );
        // Recorded for c3, a CA naming c2 vouches for no one.
        let c2_ca = generate_cluster_ca("set", &cluster("c2")).expect("ca");
        let c2 = der(&generate_leaf(&c2_ca, &cluster("c2"))
            .expect("leaf")
            .cert_pem);
        tls.set_peer_authorities(vec![recorded("c3", &c3_ca), recorded("c3", &c2_ca)])
            .expect("built");
        assert!(tls.current().still_trusts(&c2).is_err());
        assert!(tls.current().still_trusts(&c3).is_ok());
        // A file reload keeps it; a CA of another trust domain adds nothing.
        let renewed = generate_leaf(&c1_ca, &cluster("c1")).expect("leaf");
        write(
            dir.path(),
            &renewed.cert_pem,
            &renewed.key_pem,
            &c1_ca.cert_pem(),
        );
        assert!(tls.reload_now().expect("renewed"));
        assert!(tls.current().still_trusts(&c3).is_ok());
        let foreign_ca = generate_cluster_ca("other", &cluster("c3")).expect("ca");
        let foreign = der(&generate_leaf(&foreign_ca, &cluster("c3"))
            .expect("leaf")
            .cert_pem);
        tls.set_peer_authorities(vec![recorded("c3", &foreign_ca)])
            .expect("built");
        assert!(tls.current().still_trusts(&foreign).is_err());
        assert!(
            tls.current().still_trusts(&c3).is_err(),
            "replaced, not added"
        );
    }

    #[test]
    fn a_certificate_from_another_ca_is_refused_on_reload() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = generate_ca("set").expect("ca");
        let c1 = generate_leaf(&ca, &cluster("c1")).expect("leaf");
        write(dir.path(), &c1.cert_pem, &c1.key_pem, &ca.cert_pem());
        let tls = ReloadingTls::load(dir.path()).expect("load");

        let other = generate_ca("set").expect("other ca");
        let c2 = generate_leaf(&other, &cluster("c2")).expect("leaf");
        write(dir.path(), &c2.cert_pem, &c2.key_pem, &ca.cert_pem());
        let err = tls.reload_now().expect_err("untrusted");
        assert!(err.to_string().contains("not trusted by"), "{err}");
        assert_eq!(tls.current().identity(), &c1.identity);
    }

    /// Kubernetes' atomic writer: the visible files are symlinks through
    /// `..data`, itself a symlink to a timestamped directory swapped by rename.
    #[cfg(unix)]
    #[test]
    fn a_secret_volume_symlink_swap_is_picked_up() {
        use std::os::unix::fs::symlink;

        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let ca = generate_ca("set").expect("ca");
        let publish = |version: &str, leaf: &crate::tls::LeafPem| {
            let data = root.join(version);
            fs::create_dir(&data).expect("mkdir");
            write(&data, &leaf.cert_pem, &leaf.key_pem, &ca.cert_pem());
            symlink(version, root.join("..data_tmp")).expect("symlink");
            fs::rename(root.join("..data_tmp"), root.join("..data")).expect("swap");
        };
        publish("..v1", &generate_leaf(&ca, &cluster("c1")).expect("leaf"));
        for name in [CERT_FILE, KEY_FILE, CA_FILE] {
            symlink(format!("..data/{name}"), root.join(name)).expect("symlink");
        }
        let tls = ReloadingTls::load(root).expect("load");
        assert_eq!(tls.current().identity().cluster, cluster("c1"));

        publish("..v2", &generate_leaf(&ca, &cluster("c2")).expect("leaf"));
        assert!(tls.reload_now().expect("swapped"));
        assert_eq!(tls.current().identity().cluster, cluster("c2"));
    }

    #[tokio::test]
    async fn the_watcher_picks_up_changes_and_stops_with_its_owner() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = generate_ca("set").expect("ca");
        let c1 = generate_leaf(&ca, &cluster("c1")).expect("leaf");
        write(dir.path(), &c1.cert_pem, &c1.key_pem, &ca.cert_pem());
        let tls = Arc::new(ReloadingTls::load(dir.path()).expect("load"));
        let watcher = tls.spawn_watcher(Duration::from_millis(20));

        let c2 = generate_leaf(&ca, &cluster("c2")).expect("leaf");
        write(dir.path(), &c2.cert_pem, &c2.key_pem, &ca.cert_pem());
        for _ in 0..250 {
            if tls.current().identity() == &c2.identity {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(tls.current().identity(), &c2.identity);

        drop(tls);
        tokio::time::timeout(Duration::from_secs(10), watcher)
            .await
            .expect("watcher ends")
            .expect("watcher did not panic");
    }
}
