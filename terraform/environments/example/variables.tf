variable "project_id" {
  description = "ID of the Google Cloud project to deploy Loom into."
  type        = string
}

variable "region" {
  description = "Region of the Loom services."
  type        = string
  default     = "europe-west1"
}

variable "name_prefix" {
  description = "Prefix of every resource name; cloudbuild.yaml's _SERVICE_PREFIX and _REPO must match it."
  type        = string
  default     = "loom"
}

variable "loom_app" {
  description = "Python reference of your Loom app, module:attribute (LOOM_APP)."
  type        = string
}

variable "worker_invokers" {
  description = "IAM members allowed to call the worker API, e.g. [\"user:you@example.com\"]."
  type        = list(string)
  default     = []
}

variable "console_operators" {
  description = "Emails of people who open the worker's console with their own gcloud identity (gcloud run services proxy)."
  type        = list(string)
  default     = []
}

variable "grant_policy" {
  description = "Who may grant which capabilities to which flows (LOOM_GRANTS); default: nobody."
  type = object({
    grants = list(object({
      principal    = string
      flow         = optional(string, "*")
      capabilities = optional(list(string), [])
      limits       = optional(map(number), {})
    }))
  })
  default = { grants = [] }
}

variable "max_instance_count" {
  description = "Upper bound of instances per service."
  type        = number
  default     = 10
}

variable "deletion_protection" {
  description = "Protect the services, database and buckets from terraform destroy."
  type        = bool
  default     = true
}
