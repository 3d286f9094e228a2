"""Offline check of the schedules' Cloud Scheduler job: one minutely tick to the tasks
service's ``POST /tasks/schedules`` with the invoker's OIDC token, switchable off."""

from __future__ import annotations

from tests.deploy import terraform_model as tm
from tests.deploy.terraform_model import block


def test_one_minutely_tick_job_posts_the_schedules_route() -> None:
    module = tm.load_dir(tm.MODULE_DIR)
    job = module.resource("google_cloud_scheduler_job", "schedules")
    assert tm.normalize(job["schedule"]) == "* * * * *"  # cron's resolution: one tick a minute
    assert "var.schedules_enabled" in str(job["count"])
    target = block(job, "http_target")
    assert target is not None and str(target["uri"]).endswith("/tasks/schedules")
    assert not [p for p in tm.check_oidc(module) if "schedules" in p]
    assert module.variables["schedules_enabled"].get("default") is True
