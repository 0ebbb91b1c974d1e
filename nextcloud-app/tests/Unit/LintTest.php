<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit;

use PHPUnit\Framework\TestCase;

/**
 * `php -l` over every PHP file of the app and its tests, plus the house rules every file
 * follows: strict types and an SPDX licence header.
 */
class LintTest extends TestCase {
	/** @return list<string> */
	private static function phpFiles(): array {
		$files = [];
		foreach (['appinfo', 'lib', 'templates', 'nextcloud-app/tests'] as $dir) {
			$root = ISTOTA_REPO_ROOT . '/' . $dir;
			if (!is_dir($root)) {
				continue;
			}
			$iterator = new \RecursiveIteratorIterator(new \RecursiveDirectoryIterator($root, \FilesystemIterator::SKIP_DOTS));
			foreach ($iterator as $file) {
				if ($file->isFile() && $file->getExtension() === 'php') {
					$files[] = $file->getPathname();
				}
			}
		}
		sort($files);
		return $files;
	}

	public function testEveryFilePassesPhpLint(): void {
		$files = self::phpFiles();
		$this->assertGreaterThan(50, count($files));
		$failures = [];
		foreach ($files as $file) {
			exec(sprintf('%s -l %s 2>&1', escapeshellarg(PHP_BINARY), escapeshellarg($file)), $output, $code);
			if ($code !== 0) {
				$failures[] = implode("\n", $output);
			}
			$output = [];
		}
		$this->assertSame([], $failures);
	}

	public function testEveryFileDeclaresStrictTypesAndItsLicence(): void {
		foreach (self::phpFiles() as $file) {
			$head = (string)file_get_contents($file, false, null, 0, 600);
			$this->assertStringContainsString('declare(strict_types=1);', $head, $file);
			$this->assertStringContainsString('SPDX-License-Identifier: AGPL-3.0-or-later', $head, $file);
		}
	}
}
