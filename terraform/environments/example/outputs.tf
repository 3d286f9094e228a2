output "service_urls" {
  description = "URL of each Loom service, by target."
  value       = module.loom.service_urls
}

output "worker_url" {
  description = "URL of the worker service (the HTTP API)."
  value       = module.loom.worker_url
}

output "queue_name" {
  description = "Name of the Cloud Tasks queue of earlier releases (nothing new is enqueued on it)."
  value       = module.loom.queue_name
}

output "queue_id" {
  description = "Full id of the Cloud Tasks queue of earlier releases."
  value       = module.loom.queue_id
}

output "task_queues" {
  description = "Names of the Cloud Tasks queues by class and shard."
  value       = module.loom.task_queues
}

output "task_queue_counts" {
  description = "Cloud Tasks queues per class."
  value       = module.loom.task_queue_counts
}

output "topic_id" {
  description = "Pub/Sub topic that starts or resumes executions."
  value       = module.loom.topic_id
}

output "payload_bucket" {
  description = "Bucket of large payloads."
  value       = module.loom.payload_bucket
}

output "build_sources_bucket" {
  description = "Staging bucket for gcloud builds submit."
  value       = module.loom.build_sources_bucket
}

output "image_repository" {
  description = "Artifact Registry path to push images to."
  value       = module.loom.image_repository
}

output "worker_service_account_email" {
  description = "Runtime service account of the worker service (the API)."
  value       = module.loom.worker_service_account_email
}

output "service_account_emails" {
  description = "Runtime service account of each Loom service, by target."
  value       = module.loom.service_account_emails
}

output "invoker_service_account_email" {
  description = "OIDC identity of Cloud Tasks, Pub/Sub push and Cloud Scheduler."
  value       = module.loom.invoker_service_account_email
}

output "deployer_service_account_email" {
  description = "Service account to run cloudbuild.yaml as."
  value       = module.loom.deployer_service_account_email
}
