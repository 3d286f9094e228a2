variable "firestore_shards" {
  description = "Shards of the executions collection (LOOM_STORE ?shards=N): every ordered index leads with the shard, so inserts spread over this many index ranges (Firestore sustains about 500 inserts a second at the tail of one). Fixed for the database's life: the first store to write records it in loom_meta/layout, and later values are ignored."
  type        = number
  default     = 64

  validation {
    condition     = var.firestore_shards >= 1 && var.firestore_shards <= 1024 && floor(var.firestore_shards) == var.firestore_shards
    error_message = "firestore_shards must be a whole number from 1 to 1024."
  }
}

variable "task_queues_executions" {
  description = "Cloud Tasks queues of the executions class (starts, resumes, wakes), each execution's tasks routed to one by its shard. Each queue dispatches at most task_max_dispatches_per_second (Cloud Tasks allows 500)."
  type        = number
  default     = 64

  validation {
    condition     = var.task_queues_executions >= 1 && var.task_queues_executions <= 200 && floor(var.task_queues_executions) == var.task_queues_executions
    error_message = "task_queues_executions must be a whole number from 1 to 200."
  }
}

variable "task_queues_timers" {
  description = "Cloud Tasks queues of the timers class (every dispatch with a time: sleeps, gate timeouts, retries' backoff), routed by execution shard."
  type        = number
  default     = 16

  validation {
    condition     = var.task_queues_timers >= 1 && var.task_queues_timers <= 200 && floor(var.task_queues_timers) == var.task_queues_timers
    error_message = "task_queues_timers must be a whole number from 1 to 200."
  }
}

variable "task_queues_admission" {
  description = "Cloud Tasks queues of the admission class (queue admit passes, one per queue shard and second at most), routed by admit shard."
  type        = number
  default     = 4

  validation {
    condition     = var.task_queues_admission >= 1 && var.task_queues_admission <= 200 && floor(var.task_queues_admission) == var.task_queues_admission
    error_message = "task_queues_admission must be a whole number from 1 to 200."
  }
}

variable "task_queues_maintenance" {
  description = "Cloud Tasks queues of the maintenance class (purge, sweep and schedule passes, one job per shard), routed by shard."
  type        = number
  default     = 4

  validation {
    condition     = var.task_queues_maintenance >= 1 && var.task_queues_maintenance <= 200 && floor(var.task_queues_maintenance) == var.task_queues_maintenance
    error_message = "task_queues_maintenance must be a whole number from 1 to 200."
  }

  validation {
    # Cloud Tasks allows 1,000 queues per project and region (the legacy queue included).
    condition     = var.task_queues_executions + var.task_queues_timers + var.task_queues_admission + var.task_queues_maintenance <= 900
    error_message = "the four classes together may have at most 900 queues."
  }
}
