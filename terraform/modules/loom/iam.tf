# Three identities, each with only what it needs. Every grant is on a single
# resource except the project-level ones that cannot be narrower: Firestore
# access (conditioned on the one database) and the deployer's log writing.
# No identity gets owner or editor, and no service gets a public invoker.

# --- worker: runtime identity of the three Cloud Run services --------------

resource "google_service_account" "worker" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-worker"
  display_name = "Loom worker runtime"
  description  = "Runs the Loom Cloud Run services: Firestore, Cloud Tasks, payload bucket, resume secret."
}

resource "google_project_iam_member" "worker_datastore_user" {
  project = var.project_id
  role    = "roles/datastore.user"
  member  = "serviceAccount:${google_service_account.worker.email}"

  condition {
    title       = "loom-database-only"
    description = "Only the Loom Firestore database."
    expression  = "resource.name == \"projects/${var.project_id}/databases/${google_firestore_database.loom.name}\""
  }
}

resource "google_cloud_tasks_queue_iam_member" "worker_enqueuer" {
  project  = var.project_id
  location = var.region
  name     = google_cloud_tasks_queue.loom.name
  role     = "roles/cloudtasks.enqueuer"
  member   = "serviceAccount:${google_service_account.worker.email}"
}

resource "google_storage_bucket_iam_member" "worker_payloads" {
  bucket = google_storage_bucket.payloads.name
  role   = "roles/storage.objectUser"
  member = "serviceAccount:${google_service_account.worker.email}"
}

resource "google_secret_manager_secret_iam_member" "worker_resume_secret" {
  project   = var.project_id
  secret_id = google_secret_manager_secret.resume.secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.worker.email}"
}

# Creating a task that carries the invoker's OIDC token requires acting as the
# invoker (iam.serviceAccounts.actAs), on that one account only.
resource "google_service_account_iam_member" "worker_acts_as_invoker" {
  service_account_id = google_service_account.invoker.name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${google_service_account.worker.email}"
}

# --- invoker: identity of Cloud Tasks, Pub/Sub push and Cloud Scheduler ------

resource "google_service_account" "invoker" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-invoker"
  display_name = "Loom invoker"
  description  = "OIDC identity of Cloud Tasks, Pub/Sub push and Cloud Scheduler calls to the Loom services."
}

resource "google_cloud_run_v2_service_iam_member" "invoker_tasks" {
  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_service.loom["tasks"].name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.invoker.email}"
}

resource "google_cloud_run_v2_service_iam_member" "invoker_events" {
  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_service.loom["events"].name
  role     = "roles/run.invoker"
  member   = "serviceAccount:${google_service_account.invoker.email}"
}

# --- people and systems that call the worker API ---------------------------

resource "google_cloud_run_v2_service_iam_member" "worker_invokers" {
  for_each = toset(var.worker_invokers)

  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_service.loom["worker"].name
  role     = "roles/run.invoker"
  member   = each.value
}

# --- deployer: identity of the Cloud Build pipeline (cloudbuild.yaml) ------

resource "google_service_account" "deployer" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-deployer"
  display_name = "Loom deployer"
  description  = "Runs cloudbuild.yaml: pushes the image and rolls it out to the Loom services."
}

resource "google_artifact_registry_repository_iam_member" "deployer_writer" {
  project    = var.project_id
  location   = var.region
  repository = google_artifact_registry_repository.images.name
  role       = "roles/artifactregistry.writer"
  member     = "serviceAccount:${google_service_account.deployer.email}"
}

resource "google_cloud_run_v2_service_iam_member" "deployer_developer" {
  for_each = local.services

  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_service.loom[each.key].name
  role     = "roles/run.developer"
  member   = "serviceAccount:${google_service_account.deployer.email}"
}

# gcloud run deploy keeps the services' runtime identity, which requires
# acting as it.
resource "google_service_account_iam_member" "deployer_acts_as_worker" {
  service_account_id = google_service_account.worker.name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${google_service_account.deployer.email}"
}

resource "google_storage_bucket_iam_member" "deployer_build_sources" {
  bucket = google_storage_bucket.build_sources.name
  role   = "roles/storage.objectViewer"
  member = "serviceAccount:${google_service_account.deployer.email}"
}

# Read-only, for the pipeline's replay check (loom replay-check before deploy):
# it reads every live execution's history and the payloads they reference, and
# can write neither.
resource "google_project_iam_member" "deployer_datastore_viewer" {
  project = var.project_id
  role    = "roles/datastore.viewer"
  member  = "serviceAccount:${google_service_account.deployer.email}"

  condition {
    title       = "loom-database-only"
    description = "Only the Loom Firestore database."
    expression  = "resource.name == \"projects/${var.project_id}/databases/${google_firestore_database.loom.name}\""
  }
}

resource "google_storage_bucket_iam_member" "deployer_payloads_viewer" {
  bucket = google_storage_bucket.payloads.name
  role   = "roles/storage.objectViewer"
  member = "serviceAccount:${google_service_account.deployer.email}"
}

# Builds that run as a user-managed service account log to Cloud Logging.
resource "google_project_iam_member" "deployer_log_writer" {
  project = var.project_id
  role    = "roles/logging.logWriter"
  member  = "serviceAccount:${google_service_account.deployer.email}"
}

# --- Pub/Sub service agent: moves undeliverable messages to the dead letter -

resource "google_pubsub_topic_iam_member" "dead_letter_publisher" {
  project = var.project_id
  topic   = google_pubsub_topic.events_dead_letter.name
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"
}

resource "google_pubsub_subscription_iam_member" "dead_letter_subscriber" {
  project      = var.project_id
  subscription = google_pubsub_subscription.events_push.name
  role         = "roles/pubsub.subscriber"
  member       = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"
}
