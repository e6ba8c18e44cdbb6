//! The import reconciler's writes: one server-side apply or delete of an
//! import object, timed and counted in the report.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::Value;
use tokio::time::Instant;

use super::Reconciler;
use super::objects::import_resource;
use crate::discovery::kube::LocalImports;
use crate::discovery::observed::{Observed, ObservedObject};
use crate::imports::diff::Change;
use crate::imports::naming::FIELD_MANAGER;

impl Reconciler {
    /// [`Reconciler::write`], counted in the report's queue and time.
    pub(super) async fn timed_write(
        &self,
        change: &Change,
        local: &LocalImports,
        observed: &Observed,
    ) -> Result<Option<ObservedObject>, kube::Error> {
        let started = Instant::now();
        // Read as it arrives: a round's results are held until its last
        // write is made, and the server's whole object is many times the
        // size of what is kept of it.
        let result = self
            .write(change, local, observed)
            .await
            .map(|result| result.map(ObservedObject::new));
        let spent = started.elapsed().as_secs_f64();
        self.reports.send_modify(|report| {
            report.queued = report.queued.saturating_sub(1);
            report.write_seconds += spent;
        });
        result
    }

    /// Makes one write; the object the server returned for an apply.
    async fn write(
        &self,
        change: &Change,
        local: &LocalImports,
        observed: &Observed,
    ) -> Result<Option<Value>, kube::Error> {
        match change {
            Change::Apply { object, status } => {
                let kind = object["kind"].as_str().unwrap_or_default();
                let api = self.api(
                    kind,
                    object["metadata"]["namespace"].as_str().unwrap_or_default(),
                    &local.api_version,
                );
                let name = object["metadata"]["name"].as_str().unwrap_or_default();
                // Forced only over Strait's own objects and those it takes
                // over (`kube.adoptImports`): an object of the same name
                // that another controller made (the reference controller
                // names derived Services alike) is not taken over; a
                // conflict then fails the write.
                let ours = observed
                    .get(object)
                    .is_none_or(|held| held.ours() || observed.adoptable(held));
                let mut params = PatchParams::apply(FIELD_MANAGER);
                params.force = ours;
                let applied = if *status {
                    api.patch_status(name, &params, &Patch::Apply(object))
                        .await?
                } else {
                    api.patch(name, &params, &Patch::Apply(object)).await?
                };
                let mut result = serde_json::to_value(applied).ok();
                if let Some(metadata) = result
                    .as_mut()
                    .and_then(|r| r.get_mut("metadata"))
                    .and_then(Value::as_object_mut)
                {
                    metadata.remove("managedFields");
                }
                Ok(result)
            }
            Change::Delete {
                kind,
                namespace,
                name,
                ..
            } => {
                let api = self.api(kind, namespace, &local.api_version);
                match api.delete(name, &DeleteParams::background()).await {
                    Ok(_) => Ok(None),
                    // Gone already (the garbage collector was quicker).
                    Err(kube::Error::Api(status)) if status.is_not_found() => Ok(None),
                    Err(error) => Err(error),
                }
            }
        }
    }

    fn api(&self, kind: &str, namespace: &str, import_api_version: &str) -> Api<DynamicObject> {
        let resource = match kind {
            "Service" => ApiResource::erase::<Service>(&()),
            "EndpointSlice" => ApiResource::erase::<EndpointSlice>(&()),
            _ => import_resource(import_api_version),
        };
        Api::namespaced_with(self.client.clone(), namespace, &resource)
    }
}
