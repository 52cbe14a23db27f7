/**
 * The package as npm sees it: `main` and `bin` name files the build produces,
 * and the bin stays executable after the suite's own rebuild (a linked `cairn`
 * runs it directly).
 */
import { statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..');

interface PackageJson {
  main: string;
  bin: Record<string, string>;
}

async function packageJson(): Promise<PackageJson> {
  return JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as PackageJson;
}

describe('package.json', () => {
  it('main is a built module exporting startApp and loadSettings', async () => {
    const pkg = await packageJson();
    const entry = (await import(pathToFileURL(join(ROOT, pkg.main)).href)) as Record<
      string,
      unknown
    >;
    expect(typeof entry['startApp']).toBe('function');
    expect(typeof entry['loadSettings']).toBe('function');
  });

  it('every bin is executable after the build', async () => {
    const pkg = await packageJson();
    for (const file of Object.values(pkg.bin)) {
      const mode = statSync(join(ROOT, file)).mode;
      expect(mode & 0o111, `${file} has no execute bit`).not.toBe(0);
    }
  });
});

/** The oldest Node 20 every part of the install supports (the build tools need 20.19). */
const OLDEST_NODE_20 = '20.19.0';

describe('package-lock.json', () => {
  it(`installs nothing whose engines exclude Node ${OLDEST_NODE_20} (npm would warn EBADENGINE)`, async () => {
    // npm's own range check (semver ships with npm's tree; it has no types of its own here).
    const { satisfies } = createRequire(import.meta.url)('semver') as {
      satisfies: (version: string, range: string) => boolean;
    };
    const lock = JSON.parse(await readFile(join(ROOT, 'package-lock.json'), 'utf8')) as {
      packages: Record<
        string,
        { version?: string; optional?: boolean; engines?: { node?: string } | string[] }
      >;
    };
    // Optional entries are other platforms' binaries: npm skips them without a word.
    const excluding = Object.entries(lock.packages)
      .filter(([path, entry]) => path !== '' && entry.optional !== true)
      .flatMap(([path, entry]) => {
        const node = Array.isArray(entry.engines) ? undefined : entry.engines?.node;
        return node !== undefined && !satisfies(OLDEST_NODE_20, node)
          ? [`${path}@${entry.version ?? '?'} wants node ${node}`]
          : [];
      });
    expect(excluding).toEqual([]);
  });
});
