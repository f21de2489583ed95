from django.conf import settings

from django_schedulinator import task


@task(name="bench.noop")
def noop(*args, **kwargs) -> None:
    return None


if getattr(settings, "BENCH_DISPATCH", ""):
    # benchmarks/dispatchers.py: the no-op as a Django task, which the tasks dispatcher enqueues.
    from django_schedulinator.dispatch.tasks import framework

    tasks = framework()
    assert tasks is not None

    @task(name="bench.django_noop")
    @tasks.task()
    def django_noop(*args, **kwargs) -> None:
        return None
