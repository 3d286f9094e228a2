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
  tasks_url = "https://${var.name_prefix}-tasks-${data.google_project.this.number}.${var.region}.run.app"

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
