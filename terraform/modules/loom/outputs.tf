output "service_urls" {
  description = "URL of each Loom Cloud Run service, by target."
  value       = { for target, service in google_cloud_run_v2_service.loom : target => service.uri }
}

output "service_names" {
  description = "Name of each Loom Cloud Run service, by target (what cloudbuild.yaml deploys to)."
  value       = { for target, service in google_cloud_run_v2_service.loom : target => service.name }
}

output "worker_url" {
  description = "URL of the worker service (the HTTP API): its deterministic run.app URL, the audience its caller check accepts (mint tokens for it)."
  value       = local.worker_url
}

output "tasks_url" {
  description = "URL of the tasks service (Cloud Tasks and Cloud Scheduler target)."
  value       = google_cloud_run_v2_service.loom["tasks"].uri
}

output "events_url" {
  description = "URL of the events service (Pub/Sub push target)."
  value       = google_cloud_run_v2_service.loom["events"].uri
}

output "tasks_target_url" {
  description = "Value of LOOM_TASKS_TARGET_URL (the deterministic URL of the tasks service)."
  value       = local.tasks_url
}

output "queue_name" {
  description = "Name of the Cloud Tasks queue."
  value       = google_cloud_tasks_queue.loom.name
}

output "queue_id" {
  description = "Full id of the Cloud Tasks queue (projects/P/locations/R/queues/Q)."
  value       = google_cloud_tasks_queue.loom.id
}

output "topic_id" {
  description = "Full id of the Pub/Sub topic whose messages start or resume executions."
  value       = google_pubsub_topic.events.id
}

output "topic_name" {
  description = "Name of the Pub/Sub topic whose messages start or resume executions."
  value       = google_pubsub_topic.events.name
}

output "payload_bucket" {
  description = "Name of the payload bucket."
  value       = google_storage_bucket.payloads.name
}

output "build_sources_bucket" {
  description = "Bucket for gcloud builds submit --gcs-source-staging-dir."
  value       = google_storage_bucket.build_sources.name
}

output "image_repository" {
  description = "Artifact Registry path images are pushed to (REGION-docker.pkg.dev/PROJECT/REPO)."
  value       = "${google_artifact_registry_repository.images.location}-docker.pkg.dev/${var.project_id}/${google_artifact_registry_repository.images.repository_id}"
}

output "firestore_database" {
  description = "Firestore database id."
  value       = google_firestore_database.loom.name
}

output "resume_secret_id" {
  description = "Secret Manager id of LOOM_RESUME_SECRET."
  value       = google_secret_manager_secret.resume.secret_id
}

output "worker_service_account_email" {
  description = "Runtime service account of the worker service (the API)."
  value       = google_service_account.worker.email
}

output "service_account_emails" {
  description = "Runtime service account of each Loom service, by target."
  value       = local.service_accounts
}

output "invoker_service_account_email" {
  description = "Service account whose OIDC token Cloud Tasks, Pub/Sub and Cloud Scheduler present."
  value       = google_service_account.invoker.email
}

output "deployer_service_account_email" {
  description = "Service account to run cloudbuild.yaml as."
  value       = google_service_account.deployer.email
}
