/**
 * This process's id among the instances that share one database:
 * reported by `/health`, written as the owner of the work it claims. A
 * restarted process is a new instance, so the id has a random part.
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';

export function newInstanceId(): string {
  const host =
    hostname()
      .replace(/[^A-Za-z0-9.-]/g, '-')
      .slice(0, 40) || 'host';
  return `inst_${host}_${process.pid}_${randomBytes(4).toString('hex')}`;
}
