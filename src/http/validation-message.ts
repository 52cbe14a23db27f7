/**
 * Request-validation failures (ajv errors from the route schemas) as messages
 * that say what to do: the field by name, "must not be blank" instead of a
 * regular expression, and the allowed values of an enum.
 */
import type { FastifySchemaValidationError } from 'fastify';

/** The pattern USER_TEXT uses to refuse blank text (src/http/schemas.ts). */
const NOT_BLANK_PATTERN = '\\S';

/** One line for all the problems of one request part (`body`, `querystring`, `params`). */
export function describeValidation(
  where: string,
  errors: readonly FastifySchemaValidationError[],
): string {
  return errors.map((e) => describeOne(where, e)).join('; ');
}

function describeOne(where: string, e: FastifySchemaValidationError): string {
  // `/message` → `message`; `/items/0/name` → `items/0/name`; the root → the part's name.
  const field = e.instancePath ? e.instancePath.slice(1) : where;
  const params = e.params;
  switch (e.keyword) {
    case 'pattern':
      if (params['pattern'] === NOT_BLANK_PATTERN) return `${field} must not be blank`;
      break;
    case 'enum': {
      const allowed = params['allowedValues'];
      if (Array.isArray(allowed))
        return `${field} must be one of: ${allowed.map((v) => JSON.stringify(v)).join(', ')}`;
      break;
    }
    case 'additionalProperties':
      return `${field} has an unknown field "${String(params['additionalProperty'])}"`;
    case 'required':
      return `${field} is missing the required field "${String(params['missingProperty'])}"`;
    default:
      break;
  }
  return `${field} ${e.message ?? 'is invalid'}`;
}
