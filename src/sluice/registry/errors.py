"""The registry's refusals, each with the HTTP status and Confluent `error_code` a client expects."""

from __future__ import annotations

from sluice.registry.compatibility import LEVELS as LEVELS  # re-exported: the levels named in 42203

MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")


class RegistryError(Exception):
    """Answered as `{"error_code": code, "message": message}` with HTTP `status`."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def subject_not_found(subject: str) -> RegistryError:
    return RegistryError(404, 40401, f"Subject '{subject}' not found.")


def version_not_found(version: object) -> RegistryError:
    return RegistryError(404, 40402, f"Version {version} not found.")


def schema_not_found(schema_id: object | None = None) -> RegistryError:
    return RegistryError(
        404, 40403, "Schema not found" if schema_id is None else f"Schema {schema_id} not found"
    )


# The 4040x texts are Confluent's own (rest/exceptions/Errors.java), run-together sentences included: clients
# and their tests match them.
def subject_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(
        404, 40404, f"Subject '{subject}' was soft deleted.Set permanent=true to delete permanently"
    )


def subject_not_soft_deleted(subject: str) -> RegistryError:
    return RegistryError(
        404, 40405, f"Subject '{subject}' was not deleted first before being permanently deleted"
    )


def version_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(
        404,
        40406,
        f"Subject '{subject}' Version {version} was soft deleted.Set permanent=true to delete permanently",
    )


def version_not_soft_deleted(subject: str, version: int) -> RegistryError:
    return RegistryError(
        404,
        40407,
        f"Subject '{subject}' Version {version} was not deleted first before being permanently deleted",
    )


def no_subject_config(subject: str) -> RegistryError:
    return RegistryError(
        404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured"
    )


def no_subject_mode(subject: str) -> RegistryError:
    return RegistryError(404, 40409, f"Subject '{subject}' does not have subject-level mode configured")


def incompatible(messages: list[str]) -> RegistryError:
    return RegistryError(
        409, 409, "Schema being registered is incompatible with an earlier schema; " + "; ".join(messages)
    )


def invalid_schema(message: str) -> RegistryError:
    return RegistryError(422, 42201, f"Invalid schema: {message}")


def empty_schema() -> RegistryError:
    # Confluent's text for a register, look-up or check whose body has no schema, or a blank one.
    return RegistryError(422, 42201, "Empty schema")


def no_such_resource() -> RegistryError:
    """A path Jersey cannot match, or whose parameter it cannot convert (an id that is not an integer):
    Confluent answers its generic 404, `error_code` 404."""
    return RegistryError(404, 404, "HTTP 404 Not Found")


def invalid_version(version: str) -> RegistryError:
    return RegistryError(
        422,
        42202,
        # Confluent's own text: clients and their tests match it.
        f"The specified version '{version}' is not a valid version id. "
        'Allowed values are between [1, 2^31-1] and the string "latest"',
    )


def invalid_level(level: object) -> RegistryError:
    return RegistryError(
        422, 42203, f"Invalid compatibility level {level!r}: expected one of {', '.join(LEVELS)}"
    )


def invalid_mode(mode: object) -> RegistryError:
    return RegistryError(422, 42204, f"Invalid mode {mode!r}: expected one of {', '.join(MODES)}")


def not_permitted(message: str) -> RegistryError:
    return RegistryError(422, 42205, message)


def reference_exists(subject: str, version: int) -> RegistryError:
    """Confluent's words (RestReferenceExistsException, naming the SchemaKey as Java prints it)."""
    return RegistryError(
        422,
        42206,
        f"One or more references exist to the schema {{magic=1,keytype=SCHEMA,subject={subject},version={version}}}.",
    )


def id_taken(schema_id: int) -> RegistryError:
    return RegistryError(422, 42207, f"Schema id {schema_id} is already used by a different schema")


def bad_request(message: str) -> RegistryError:
    """Malformed JSON or a body of the wrong shape (Confluent answers these with 422 too)."""
    return RegistryError(422, 422, message)


def store_error(message: str) -> RegistryError:
    return RegistryError(500, 50001, message)


def store_timeout(message: str) -> RegistryError:
    return RegistryError(500, 50002, message)


def forwarding_failed(message: str) -> RegistryError:
    return RegistryError(500, 50003, message)


def unknown_primary(message: str) -> RegistryError:
    return RegistryError(500, 50004, message)
