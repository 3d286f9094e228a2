variable "project_id" {
  description = "ID of the Google Cloud project that hosts Loom."
  type        = string
}

variable "region" {
  description = "Region of the Cloud Run services, the Cloud Tasks queue, the Scheduler job and the Artifact Registry repository."
  type        = string
}

variable "name_prefix" {
  description = "Prefix of every resource name (services are <prefix>-worker, <prefix>-tasks and <prefix>-events)."
  type        = string
  default     = "loom"

  validation {
    # Service account ids are 6-30 characters; the longest suffix used is "-deployer".
    condition     = can(regex("^[a-z][a-z0-9-]{0,19}[a-z0-9]$", var.name_prefix))
    error_message = "name_prefix must be 2-21 lowercase letters, digits or hyphens, start with a letter and not end with a hyphen."
  }

  validation {
    # Bucket names are <project_id>-<name_prefix>-payloads and -build-sources (storage.tf),
    # and Cloud Storage refuses names longer than 63 characters.
    condition     = length("${var.project_id}-${var.name_prefix}-build-sources") <= 63
    error_message = "project_id and name_prefix together must be at most 48 characters: the bucket name <project_id>-<name_prefix>-build-sources may not exceed 63."
  }
}

variable "labels" {
  description = "Labels added to every resource that supports them."
  type        = map(string)
  default     = {}
}

variable "loom_app" {
  description = "Python reference of the Loom app served by every service, as module:attribute (LOOM_APP)."
  type        = string

  validation {
    condition     = can(regex("^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$", var.loom_app))
    error_message = "loom_app must look like package.module:attribute."
  }
}

variable "image" {
  description = "Container image the services are created with. Cloud Build rolls out later images with gcloud run deploy (docs/adr/0010), so Terraform ignores later changes of the image."
  type        = string
  default     = "us-docker.pkg.dev/cloudrun/container/hello"
}

variable "max_instance_count" {
  description = "Upper bound of instances per Cloud Run service. Every service scales to zero."
  type        = number
  default     = 10

  validation {
    condition     = var.max_instance_count >= 1 && var.max_instance_count <= 1000
    error_message = "max_instance_count must be between 1 and 1000."
  }
}

variable "max_concurrency" {
  description = "Maximum concurrent requests per instance."
  type        = number
  default     = 80

  validation {
    condition     = var.max_concurrency >= 1 && var.max_concurrency <= 1000
    error_message = "max_concurrency must be between 1 and 1000."
  }
}

variable "cpu" {
  description = "CPU limit of each container."
  type        = string
  default     = "1"
}

variable "memory" {
  description = "Memory limit of each container."
  type        = string
  default     = "512Mi"
}

variable "request_timeout_seconds" {
  description = "Cloud Run request timeout. Must be at least the Cloud Tasks dispatch deadline, so that Cloud Run never cuts a request that Cloud Tasks still waits for."
  type        = number
  default     = 600

  validation {
    condition     = var.request_timeout_seconds >= 1 && var.request_timeout_seconds <= 3600
    error_message = "request_timeout_seconds must be between 1 and 3600."
  }
}

variable "dispatch_deadline_seconds" {
  description = "How long Cloud Tasks waits for one attempt of a task before it retries it. Cloud Tasks' default for HTTP tasks is 600 s."
  type        = number
  default     = 600

  validation {
    condition     = var.dispatch_deadline_seconds >= 15 && var.dispatch_deadline_seconds <= 1800
    error_message = "dispatch_deadline_seconds must be between 15 and 1800 (Cloud Tasks limits)."
  }
}

variable "worker_ingress" {
  description = "Ingress of the worker service (the public API, still IAM-protected). The tasks and events services are always internal-only."
  type        = string
  default     = "INGRESS_TRAFFIC_ALL"

  validation {
    condition     = contains(["INGRESS_TRAFFIC_ALL", "INGRESS_TRAFFIC_INTERNAL_ONLY", "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"], var.worker_ingress)
    error_message = "worker_ingress must be one of INGRESS_TRAFFIC_ALL, INGRESS_TRAFFIC_INTERNAL_ONLY, INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER."
  }
}

variable "worker_invokers" {
  description = "IAM members allowed to call the worker service, e.g. user:alice@example.com or group:ops@example.com. Public members are refused."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for m in var.worker_invokers : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "worker_invokers must not contain allUsers or allAuthenticatedUsers: Loom services are private."
  }
}

variable "caller_check" {
  description = "Check, in the worker and tasks services themselves, the Google ID token of every request but the probes (LOOM_CALLER_AUTH=loom_gcp.auth:google_id_token): defense in depth behind Cloud Run IAM. On by default; turning it off leaves IAM alone in front of the API."
  type        = bool
  default     = true
}

variable "console_operators" {
  description = "Emails of people who open the worker's console with their own gcloud identity (gcloud run services proxy, see the README): each gets roles/run.invoker on the worker and passes its caller check."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for e in var.console_operators : can(regex("^[^:@\\s]+@[^:@\\s]+$", e)) && !contains(["allUsers", "allAuthenticatedUsers"], e)])
    error_message = "console_operators are plain emails (alice@example.com), without a user: prefix; never allUsers or allAuthenticatedUsers."
  }
}

variable "caller_principals" {
  description = "Emails the worker's caller check admits besides the user: and serviceAccount: members of worker_invokers and the console_operators (it sees a person's email, not the groups they are in: list the members of a group: invoker here)."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for e in var.caller_principals : can(regex("^[^:@\\s]+@[^:@\\s]+$", e))])
    error_message = "caller_principals are plain emails (ops@example.com), without a prefix."
  }
}

variable "caller_audiences" {
  description = "Audiences the worker's caller check accepts besides the worker's own URL, e.g. the URL of a custom domain. gcloud's own client id is added when a person may call (user: invokers, console_operators): gcloud mints their ID tokens for it."
  type        = list(string)
  default     = []
}

variable "grant_policy" {
  description = "The grant policy (LOOM_GRANTS): which principal may grant which capabilities to which flows, and raise which execution limits (see the README's Security section). Default: nobody may grant anything."
  type = object({
    grants = list(object({
      principal    = string
      flow         = optional(string, "*")
      capabilities = optional(list(string), [])
      limits       = optional(map(number), {})
    }))
  })
  default = { grants = [] }

  validation {
    condition     = alltrue([for g in var.grant_policy.grants : g.principal != "" && g.principal != "*"])
    error_message = "A grant rule names its principal (or a prefix such as local:*); \"*\" alone would let every caller grant."
  }
}

variable "event_publishers" {
  description = "Principals (IAM member strings, e.g. serviceAccount:app@p.iam.gserviceaccount.com) that may publish start/resume messages to the events topic. Nobody else gets roles/pubsub.publisher on it; a resume must also carry a loom-signature attribute."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for m in var.event_publishers : !contains(["allUsers", "allAuthenticatedUsers"], m) && can(regex("^(serviceAccount|user|group):", m))])
    error_message = "event_publishers must name principals (serviceAccount:, user: or group:), never allUsers or allAuthenticatedUsers."
  }
}

variable "firestore_database" {
  description = "Firestore database id (LOOM_STORE=firestore://PROJECT/DATABASE)."
  type        = string
  default     = "loom"
}

variable "firestore_location" {
  description = "Firestore location, a region (europe-west1) or a multi-region (eur3, nam5). Defaults to var.region."
  type        = string
  default     = null
}

variable "firestore_unindexed_fields" {
  description = "Single-field index exemptions, collection group => fields: fields the store never filters or orders by, that are monotonic (would hot-spot their index) or large (cost write time)."
  type        = map(list(string))
  default = {
    events     = ["at", "body", "bodies", "last"]
    executions = ["updated_at", "start", "head", "end"]
    snapshots  = ["data"]
  }

  validation {
    # The event store's queries need these indexes on real Firestore (the
    # emulator does not enforce indexes, so tests would not notice).
    condition = length(setintersection(
      toset(flatten([for collection, fields in var.firestore_unindexed_fields : [for f in fields : "${collection}.${f}"]])),
      toset(["events.seq", "executions.created_at", "executions.status", "executions.wake_at", "executions.flow"]),
    )) == 0
    error_message = "events.seq, executions.created_at, executions.status, executions.wake_at and executions.flow are queried by the event store and must stay indexed."
  }
}

variable "payload_prefix" {
  description = "Object prefix of large payloads in the payload bucket (LOOM_BLOBS=gs://BUCKET/PREFIX)."
  type        = string
  default     = "payloads"
}

variable "payload_retention_days" {
  description = "Age in days after which stored payloads are deleted. Keep it longer than the longest execution plus the history retention."
  type        = number
  default     = 90

  validation {
    condition     = var.payload_retention_days >= 1
    error_message = "payload_retention_days must be at least 1."
  }
}

variable "storage_location" {
  description = "Location of the buckets. Defaults to var.region."
  type        = string
  default     = null
}

variable "task_max_dispatches_per_second" {
  description = "Cloud Tasks queue rate limit."
  type        = number
  default     = 100
}

variable "task_max_concurrent_dispatches" {
  description = "Cloud Tasks queue concurrency limit."
  type        = number
  default     = 100
}

variable "task_max_attempts" {
  description = "Attempts per task before Cloud Tasks gives up; the sweeper redispatches stranded executions after that."
  type        = number
  default     = 100
}

variable "task_min_backoff_seconds" {
  description = "Smallest wait between two attempts of a task."
  type        = number
  default     = 1
}

variable "task_max_backoff_seconds" {
  description = "Largest wait between two attempts of a task."
  type        = number
  default     = 300
}

variable "task_max_doublings" {
  description = "How many times the wait between attempts doubles before it grows linearly."
  type        = number
  default     = 8
}

variable "task_log_sampling_ratio" {
  description = "Fraction of task operations logged by Cloud Tasks (0 to 1)."
  type        = number
  default     = 0.1
}

variable "sweep_schedule" {
  description = "Cron schedule of the sweeper (POST /tasks/sweep) that redispatches expired claims and due timers."
  type        = string
  default     = "*/5 * * * *"
}

variable "retention_days" {
  description = "Days a finished execution is kept (events, snapshots, payload blobs) before the daily purge deletes it. Keep payload_retention_days longer."
  type        = number
  default     = 30

  validation {
    condition     = var.retention_days >= 1
    error_message = "retention_days must be at least 1."
  }
}

variable "purge_schedule" {
  description = "Cron schedule of the retention purge (POST /tasks/purge)."
  type        = string
  default     = "17 3 * * *"
}

variable "sweep_time_zone" {
  description = "Time zone of sweep_schedule."
  type        = string
  default     = "Etc/UTC"
}

variable "sweep_deadline_seconds" {
  description = "How long Cloud Scheduler waits for one sweep. Must not exceed request_timeout_seconds."
  type        = number
  default     = 300

  validation {
    condition     = var.sweep_deadline_seconds >= 15 && var.sweep_deadline_seconds <= 1800
    error_message = "sweep_deadline_seconds must be between 15 and 1800 (Cloud Scheduler limits)."
  }
}

variable "pubsub_max_delivery_attempts" {
  description = "Deliveries of one Pub/Sub message before it goes to the dead-letter topic."
  type        = number
  default     = 10

  validation {
    condition     = var.pubsub_max_delivery_attempts >= 5 && var.pubsub_max_delivery_attempts <= 100
    error_message = "pubsub_max_delivery_attempts must be between 5 and 100 (Pub/Sub limits)."
  }
}

variable "resume_secret_version" {
  description = "Bump to generate and store a new LOOM_RESUME_SECRET (the value is write-only: never in the state)."
  type        = number
  default     = 1
}

variable "image_keep_count" {
  description = "Most recent image versions the Artifact Registry cleanup policy always keeps."
  type        = number
  default     = 10
}

variable "deletion_protection" {
  description = "Protect the services, the Firestore database and the buckets from terraform destroy. Set to false and apply before tearing an environment down."
  type        = bool
  default     = true
}

variable "schedules_enabled" {
  description = "Whether the minutely Cloud Scheduler job that fires the app's schedules (POST /tasks/schedules) exists. Turn off for an app that declares no schedules."
  type        = bool
  default     = true
}
