"""The binaries of one job, for the runfiles (`data`) of every test that starts one."""

JOB_BINARIES = [
    "//scheduler:ps_scheduler",
    "//server:ps_server",
    "//worker:ps_worker",
    "//worker/data:ps_datagen",
]
