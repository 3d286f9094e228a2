# One identity per Cloud Run service, each with only the roles its code uses,
# plus the invoker (the OIDC identity of Cloud Tasks, Pub/Sub push and Cloud
# Scheduler) and the deployer. Every grant is on a single resource except two
# project-level ones that cannot be narrower: Firestore access (conditioned on
# the one database) and the deployer's log writing. No identity gets owner or
# editor, no service gets a public invoker, and no service may delete payload
# objects (they expire by the bucket's lifecycle rule).
#
#   worker  (internet-facing API): Firestore, write+read payloads, the resume
#           secret (checks resumes and verdicts), enqueue tasks as the invoker
#           (a start, resume or verdict hands the execution to the tasks service)
#   tasks   (private): Firestore, write+read payloads, enqueue tasks as the
#           invoker (timers, the sweeper's redispatches); no secret
#   events  (private): Firestore, write+read payloads, the resume secret
#           (checks Pub/Sub messages' signatures), enqueue tasks as the invoker
#   invoker: run.invoker on the tasks and events services only

locals {
  # Which service runs as which identity (run.tf), and which of them read the
  # resume secret (run.tf wires LOOM_RESUME_SECRET only into those).
  service_accounts = {
    worker = google_service_account.worker.email
    tasks  = google_service_account.tasks.email
    events = google_service_account.events.email
  }
  service_account_ids = {
    worker = google_service_account.worker.name
    tasks  = google_service_account.tasks.name
    events = google_service_account.events.name
  }
  secret_readers = toset(["worker", "events"])
}

resource "google_service_account" "worker" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-worker"
  display_name = "Loom worker service"
  description  = "Runs the internet-facing Loom worker API."
}

resource "google_service_account" "tasks" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-tasks"
  display_name = "Loom tasks service"
  description  = "Runs the Loom tasks target (Cloud Tasks deliveries and the sweeper)."
}

resource "google_service_account" "events" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-events"
  display_name = "Loom events service"
  description  = "Runs the Loom events target (Pub/Sub messages)."
}

resource "google_project_iam_member" "runtime_datastore_user" {
  for_each = local.services

  project = var.project_id
  role    = "roles/datastore.user"
  member  = "serviceAccount:${local.service_accounts[each.key]}"

  condition {
    title       = "loom-database-only"
    description = "Only the Loom Firestore database."
    expression  = "resource.name == \"projects/${var.project_id}/databases/${google_firestore_database.loom.name}\""
  }
}

resource "google_cloud_tasks_queue_iam_member" "runtime_enqueuer" {
  for_each = local.services

  project  = var.project_id
  location = var.region
  name     = google_cloud_tasks_queue.loom.name
  role     = "roles/cloudtasks.enqueuer"
  member   = "serviceAccount:${local.service_accounts[each.key]}"
}

# Payloads are written and read, never deleted by a service: objectCreator +
# objectViewer instead of objectUser (which includes delete).
resource "google_storage_bucket_iam_member" "runtime_payload_writer" {
  for_each = local.services

  bucket = google_storage_bucket.payloads.name
  role   = "roles/storage.objectCreator"
  member = "serviceAccount:${local.service_accounts[each.key]}"
}

resource "google_storage_bucket_iam_member" "runtime_payload_reader" {
  for_each = local.services

  bucket = google_storage_bucket.payloads.name
  role   = "roles/storage.objectViewer"
  member = "serviceAccount:${local.service_accounts[each.key]}"
}

resource "google_secret_manager_secret_iam_member" "runtime_resume_secret" {
  for_each = local.secret_readers

  project   = var.project_id
  secret_id = google_secret_manager_secret.resume.secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${local.service_accounts[each.key]}"
}

# Creating a task that carries the invoker's OIDC token requires acting as the
# invoker (iam.serviceAccounts.actAs), on that one account only.
resource "google_service_account_iam_member" "runtime_acts_as_invoker" {
  for_each = local.services

  service_account_id = google_service_account.invoker.name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${local.service_accounts[each.key]}"
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

# The console's operators call the worker as themselves (gcloud run services proxy).
resource "google_cloud_run_v2_service_iam_member" "console_operators" {
  for_each = toset([for e in var.console_operators : "user:${e}"])

  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_service.loom["worker"].name
  role     = "roles/run.invoker"
  member   = each.value
}

# --- who may publish to the events topic: named principals only ------------

resource "google_pubsub_topic_iam_member" "event_publishers" {
  for_each = toset(var.event_publishers)

  project = var.project_id
  topic   = google_pubsub_topic.events.name
  role    = "roles/pubsub.publisher"
  member  = each.value
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

# gcloud run deploy keeps each service's runtime identity, which requires
# acting as it.
resource "google_service_account_iam_member" "deployer_acts_as_runtime" {
  for_each = local.services

  service_account_id = local.service_account_ids[each.key]
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
