provider "google" {
  project = var.project_id
  region  = var.region
}

module "loom" {
  source = "../../modules/loom"

  project_id          = var.project_id
  region              = var.region
  name_prefix         = var.name_prefix
  loom_app            = var.loom_app
  worker_invokers     = var.worker_invokers
  console_operators   = var.console_operators
  grant_policy        = var.grant_policy
  max_instance_count  = var.max_instance_count
  deletion_protection = var.deletion_protection
  labels              = { env = "example" }
}
