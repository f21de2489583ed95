"""The schedule change form, its JSON editor, and the changelist's action form."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib.admin import helpers
from django.core.exceptions import ValidationError
from django.forms.fields import InvalidJSONInput
from django.forms.models import construct_instance
from django.utils.duration import duration_string
from django.utils.text import capfirst
from django.utils.translation import gettext_lazy as _

from django_schedulinator import services
from django_schedulinator.dispatch import DEFAULT_ALIAS, dispatchers
from django_schedulinator.errors import ScheduleDeleted, VersionConflict
from django_schedulinator.models import Calendar, Schedule
from django_schedulinator.models.validators import json_text_too_deep, json_too_deep_error
from django_schedulinator.registry import registry
from django_schedulinator.services import outside_errors


class PrettyJSONField(forms.JSONField):
    """Shows the value indented, so that args and kwargs can be read and edited."""

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            value = ""  # spaces alone are an empty box, not invalid JSON
        if isinstance(value, str) and json_text_too_deep(value):  # json.loads would recurse
            raise json_too_deep_error()
        return super().to_python(value)

    def bound_data(self, data: Any, initial: Any) -> Any:
        if isinstance(data, str) and json_text_too_deep(data):
            return InvalidJSONInput(data)  # shown again as typed, with its error
        return super().bound_data(data, initial)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, InvalidJSONInput):
            return value  # what was typed, shown again with its error
        return json.dumps(value, ensure_ascii=False, indent=2, cls=self.encoder)


class JSONEditorWidget(forms.Textarea):
    """A monospace textarea whose script says at once whether the text is valid JSON (and
    of the expected type). The model's validation stays the source of truth."""

    template_name = "django_schedulinator/admin/json_editor.html"

    def __init__(self, attrs: dict[str, Any] | None = None, *, json_type: str = "") -> None:
        defaults = {"class": "schedulinator-json", "cols": "60", "spellcheck": "false"}
        if json_type:
            defaults["data-json-type"] = json_type  # "array" or "object"
        super().__init__({**defaults, **(attrs or {})})

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        lines = str(value or "").count("\n") + 1
        context["widget"]["attrs"]["rows"] = str(min(max(lines + 1, 3), 20))
        return context

    class Media:
        js = ("django_schedulinator/json_editor.js",)
        css = {"all": ("django_schedulinator/admin.css",)}


class CalendarChoicesWidget(forms.CheckboxSelectMultiple):
    """The calendars of excluded days as check boxes, with a link to add one (in a new tab:
    the form keeps what was typed). With no calendar yet it says so, instead of an empty
    box."""

    template_name = "django_schedulinator/admin/calendar_choices.html"

    def __init__(self, attrs: dict[str, Any] | None = None, *, add_url: str = "") -> None:
        super().__init__(attrs)
        self.add_url = add_url

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        context["add_url"] = self.add_url
        return context


STALE_EDIT = _(
    "This schedule was changed by someone else while you edited it (now version "
    "%(current)s, you started from %(started)s). Reload the page to see their change, then "
    "make yours again."
)
ARGS_EXPECTED = _('Enter a JSON list: [] for no arguments, or for example [1, "a"].')
KWARGS_EXPECTED = _('Enter a JSON object: {} for no keyword arguments, or for example {"a": 1}.')

# The fields whose values decide the next runs: the preview follows them as they are edited.
PREVIEW_FIELDS = Schedule.TIMING_FIELDS


if TYPE_CHECKING:
    _ModelForm = forms.ModelForm[Schedule]
else:  # not generic at run time
    _ModelForm = forms.ModelForm


class SignedDurationField(forms.DurationField):
    """A duration that may be negative (a solar offset), shown as it is typed: "-00:30:00",
    not Django's "-1 23:30:00"."""

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, timedelta) and value < timedelta(0):
            return "-" + duration_string(-value)
        return super().prepare_value(value)


class ScheduleForm(_ModelForm):
    # Where the calendars' widget links to add a calendar ("": it does not); the schedule
    # admin sets it for a user who may add one.
    calendar_add_url = ""
    # The version the form was loaded at: an edit based on an older one is refused. Text,
    # read in clean(): an error of a hidden field would not be seen.
    version = forms.CharField(required=False, widget=forms.HiddenInput)

    class Meta:
        model = Schedule
        fields = Schedule.SETTINGS_FIELDS
        field_classes = {
            "args": PrettyJSONField,
            "kwargs": PrettyJSONField,
            "dispatch_options": PrettyJSONField,
            "solar_offset": SignedDurationField,
        }
        widgets = {
            "args": JSONEditorWidget(json_type="array"),
            "kwargs": JSONEditorWidget(json_type="object"),
            "dispatch_options": JSONEditorWidget(json_type="object"),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A choice list from the registry: a dotted path typed into the admin can never
        # reach the scheduler. A saved schedule's task stays a choice when it is no longer
        # registered, so the schedule remains editable; no other unregistered name is one.
        # Replaced only where the form has them: a declared schedule shows them read-only.
        current = self.instance.task if self.instance.pk is not None else None
        if "task" in self.fields:
            self.fields["task"] = forms.ChoiceField(
                choices=[("", "---------"), *registry.choices(current)],
                help_text=Schedule._meta.get_field("task").help_text,
            )
        # Likewise the dispatcher: an alias from the settings, or the one the schedule has.
        alias = self.instance.dispatcher if self.instance.pk is not None else None
        aliases = dispatchers.aliases()
        if "dispatcher" in self.fields:
            self.fields["dispatcher"] = forms.ChoiceField(
                choices=[(a, a) for a in aliases]
                + (
                    [(alias, _("%s (not configured)") % alias)]
                    if alias and alias not in aliases
                    else []
                ),
                initial=DEFAULT_ALIAS,
                help_text=Schedule._meta.get_field("dispatcher").help_text,
            )
        # The calendars by name, from those there are (and any the schedule still names).
        if "calendars" in self.fields:
            named = list(self.instance.calendars or []) if self.instance.pk is not None else []
            names = list(Calendar.objects.values_list("name", flat=True))
            self.fields["calendars"] = forms.MultipleChoiceField(
                choices=[(n, n) for n in dict.fromkeys([*names, *named])],
                required=False,
                widget=CalendarChoicesWidget(add_url=self.calendar_add_url),
                label=capfirst(Schedule._meta.get_field("calendars").verbose_name),
                help_text=Schedule._meta.get_field("calendars").help_text,
            )
        if "version" in self.fields and self.instance.pk is not None:
            self.fields["version"].initial = self.instance.version

    # An empty box reaches the model as None, whose error names a Python type: say what
    # to type instead. Empty is an error, not [] or {}, so that a box cleared by mistake
    # never drops the arguments silently.
    def clean_args(self) -> Any:
        value = self.cleaned_data.get("args")
        if not isinstance(value, list):
            raise ValidationError(ARGS_EXPECTED, code="not_a_list")
        return value

    def clean_kwargs(self) -> Any:
        value = self.cleaned_data.get("kwargs")
        if not isinstance(value, dict):
            raise ValidationError(KWARGS_EXPECTED, code="not_an_object")
        return value

    def clean_dispatch_options(self) -> Any:
        value = self.cleaned_data.get("dispatch_options")
        return {} if value is None else value  # an empty box: no options

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        # What the row's own rules cannot tell (the dispatcher, a new one-off in the
        # future), as every write path checks it (validation.validate); the row's own are
        # the model's (full_clean, after this).
        edited = construct_instance(self, copy.copy(self.instance))
        for name, problem in outside_errors(edited, failed=self.errors.keys()).items():
            self.add_error(name if name in self.fields else None, problem)
        if self.instance.pk is not None and "version" in self.fields:
            self._check_version(cleaned.get("version"))
        return cleaned

    def _check_version(self, posted: str | None) -> None:
        try:
            started_from: int | None = int(posted or "")
        except ValueError:
            started_from = None
        if started_from is None:
            raise ValidationError(
                _(
                    "The form does not say which version of the schedule it edits. Reload "
                    "the page, then make your change again."
                ),
                code="no_version",
            )
        # The admin's change view runs in a transaction: the service keeps the row locked
        # until the save, so no other edit can slip in between this check and the write.
        try:
            services.lock_for_edit(self.instance, started_from)
        except ScheduleDeleted:
            raise ValidationError(
                _("This schedule was deleted while you edited it."), code="deleted"
            ) from None
        except VersionConflict as exc:
            raise ValidationError(
                STALE_EDIT,
                code="stale",
                params={"current": exc.current, "started": started_from},
            ) from None


PAUSE_NOTE_MAX = Schedule._meta.get_field("pause_note").max_length


class ScheduleActionForm(helpers.ActionForm):
    # No max_length here: any error of this form makes Django say "No action selected."
    # The pause action checks the note with the model's own rules and says what is wrong;
    # the browser's maxlength only helps while typing.
    note = forms.CharField(
        required=False,
        label=_("Note (for pause)"),
        widget=forms.TextInput(attrs={"maxlength": str(PAUSE_NOTE_MAX)}),
    )
