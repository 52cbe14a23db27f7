/**
 * The package as npm sees it: `main` and `bin` name files the build produces,
 * and the bin stays executable after the suite's own rebuild (a linked `cairn`
 * runs it directly).
 */
import { statSync } from 'node:fs';
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
  it('main is a built module exporting buildApp and loadSettings', async () => {
    const pkg = await packageJson();
    const entry = (await import(pathToFileURL(join(ROOT, pkg.main)).href)) as Record<
      string,
      unknown
    >;
    expect(typeof entry['buildApp']).toBe('function');
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
