from django_schedulinator import task


@task(name="bench.noop")
def noop(*args, **kwargs) -> None:
    return None
