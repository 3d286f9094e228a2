data "google_project" "this" {
  project_id = var.project_id

  # Reading a project needs the Resource Manager API, which a brand-new project may lack.
  depends_on = [google_project_service.apis]
}

locals {
  labels = merge(var.labels, { app = "loom" })

  # One container image, one Cloud Run service per functions-framework target.
  # Only the worker (the public API) may take traffic from outside Google;
  # Cloud Tasks, Cloud Scheduler and Pub/Sub push count as internal traffic.
  services = {
    worker = { ingress = var.worker_ingress }
    tasks  = { ingress = "INGRESS_TRAFFIC_INTERNAL_ONLY" }
    events = { ingress = "INGRESS_TRAFFIC_INTERNAL_ONLY" }
  }

  # The tasks service needs its own URL (tasks carry it as their target), which
  # it cannot reference without a cycle; Cloud Run's deterministic URL breaks it.
  # The worker's caller check names its own URL as the tokens' audience, the same way.
  tasks_url  = "https://${var.name_prefix}-tasks-${data.google_project.this.number}.${var.region}.run.app"
  worker_url = "https://${var.name_prefix}-worker-${data.google_project.this.number}.${var.region}.run.app"

  # The caller check (LOOM_CALLER_AUTH, loom_gcp.auth) of each service, by target: who may
  # call it (emails) and for which audiences their ID tokens are minted. The worker admits
  # its user: and serviceAccount: invokers, the console operators and caller_principals;
  # tasks, the invoker account of Cloud Tasks and Cloud Scheduler. events is a CloudEvent
  # target (no routes): Pub/Sub's signature check guards it (LOOM_EVENTS_SECRET).
  invoker_emails = [for m in var.worker_invokers : split(":", m)[1] if can(regex("^(user|serviceAccount):", m))]
  worker_people  = length(var.console_operators) > 0 || anytrue([for m in var.worker_invokers : startswith(m, "user:")])
  caller_principals = {
    worker = distinct(concat(local.invoker_emails, var.console_operators, var.caller_principals))
    tasks  = [google_service_account.invoker.email]
    events = []
  }
  caller_audiences = {
    worker = distinct(concat([local.worker_url], var.caller_audiences, local.worker_people ? [local.gcloud_client_id] : []))
    tasks  = [local.tasks_url]
    events = []
  }
  caller_checked = toset(var.caller_check ? ["worker", "tasks"] : [])
  # The audience of a person's ID token minted by gcloud (loom_gcp.auth.GCLOUD_CLIENT_ID).
  gcloud_client_id = "32555940559.apps.googleusercontent.com"

  # gunicorn's request threads: Cloud Run's concurrency plus the threads kept for /health and
  # /live (loom.workers.admission.PROBE_RESERVE), so a probe never waits for a thread.
  request_threads = var.max_concurrency + 2

  firestore_location = coalesce(var.firestore_location, var.region)
  storage_location   = upper(coalesce(var.storage_location, var.region))

  unindexed_fields = merge([
    for collection, fields in var.firestore_unindexed_fields : {
      for field in fields : "${collection}.${field}" => { collection = collection, field = field }
    }
  ]...)

  apis = toset([
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    # A brand-new project: reading it (data.google_project) and enabling the others.
    "cloudresourcemanager.googleapis.com",
    "cloudscheduler.googleapis.com",
    "cloudtasks.googleapis.com",
    "firestore.googleapis.com",
    "iam.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "secretmanager.googleapis.com",
    "serviceusage.googleapis.com",
    "storage.googleapis.com",
  ])
}

resource "google_project_service" "apis" {
  for_each = local.apis

  project            = var.project_id
  service            = each.value
  disable_on_destroy = false
}
