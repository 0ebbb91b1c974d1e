<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Unit\Migration;

use OCA\Istota\Migration\RestoreSidecarPermissions;
use OCA\Istota\Tests\Support\RecordingLogger;
use OCA\Istota\Tests\Support\RecordingOutput;
use OCP\Migration\IRepairStep;
use PHPUnit\Framework\TestCase;

/** Runs the repair step against a real app folder in the temp dir, with real chmod(). */
class RestoreSidecarPermissionsTest extends TestCase {
	private string $root;
	private RecordingLogger $logger;

	protected function setUp(): void {
		$this->root = sys_get_temp_dir() . '/istota-app-' . bin2hex(random_bytes(6));
		mkdir($this->root, 0700);
		$this->logger = new RecordingLogger();
	}

	protected function tearDown(): void {
		self::remove($this->root);
	}

	private static function remove(string $path): void {
		if (is_link($path) || is_file($path)) {
			unlink($path);
			return;
		}
		if (!is_dir($path)) {
			return;
		}
		foreach (scandir($path) as $entry) {
			if ($entry !== '.' && $entry !== '..') {
				self::remove($path . '/' . $entry);
			}
		}
		rmdir($path);
	}

	private function binary(string $arch, int $mode, string $name = 'istota'): string {
		$path = $this->root . '/bin/' . $arch . '/' . $name;
		if (!is_dir(dirname($path))) {
			mkdir(dirname($path), 0755, true);
		}
		file_put_contents($path, "\x7fELF not really\n");
		chmod($path, $mode);
		clearstatcache();
		return $path;
	}

	private function mode(string $path): int {
		clearstatcache(true, $path);
		return fileperms($path) & 0777;
	}

	private function runStep(string $machine): RecordingOutput {
		$output = new RecordingOutput();
		(new RestoreSidecarPermissions($this->logger, $this->root, $machine))->run($output);
		return $output;
	}

	public static function machines(): array {
		return [
			'x86_64 uses amd64' => ['x86_64', 'amd64', 'arm64'],
			'aarch64 uses arm64' => ['aarch64', 'arm64', 'amd64'],
			'arm64 (BSD spelling) uses arm64' => ['arm64', 'arm64', 'amd64'],
		];
	}

	/** @dataProvider machines */
	public function testRestoresTheRunBitOfBothBinaries(string $machine, string $own, string $other): void {
		$ownPath = $this->binary($own, 0644);
		$otherPath = $this->binary($other, 0600);

		$output = $this->runStep($machine);

		$this->assertSame(0755, $this->mode($ownPath));
		$this->assertSame(0755, $this->mode($otherPath));
		$this->assertSame([], $output->of('warning'));
		$this->assertCount(2, $output->of('info'));
		$this->assertStringContainsString($ownPath, implode("\n", $output->of('info')));
		$this->assertStringContainsString('mode was 0644', implode("\n", $output->of('info')));
		$this->assertSame([], $this->logger->records);
	}

	/** @dataProvider machines */
	public function testMissingBinaryOfThisMachineIsAWarningTheOtherIsNot(string $machine, string $own, string $other): void {
		$otherPath = $this->binary($other, 0644);

		$output = $this->runStep($machine);

		$warnings = $output->of('warning');
		$this->assertCount(1, $warnings);
		$this->assertStringContainsString($this->root . '/bin/' . $own . '/istota', $warnings[0]);
		$this->assertStringContainsString('missing', $warnings[0]);
		$this->assertSame(0755, $this->mode($otherPath), 'the binary that is there is still fixed');
	}

	/** @dataProvider machines */
	public function testRestoresTheRunBitOfTheSandboxInits(string $machine, string $own, string $other): void {
		$paths = [
			$this->binary($own, 0644), $this->binary($own, 0644, 'istota-init'),
			$this->binary($other, 0600), $this->binary($other, 0600, 'istota-init'),
		];

		$output = $this->runStep($machine);

		foreach ($paths as $path) {
			$this->assertSame(0755, $this->mode($path), $path);
		}
		$this->assertSame([], $output->of('warning'));
		$this->assertCount(4, $output->of('info'));
		$this->assertStringContainsString($this->root . '/bin/' . $own . '/istota-init', implode("\n", $output->of('info')));
	}

	public function testMissingSandboxInitIsNoWarning(): void {
		// The sidecar runs its own sandbox-init without it, only slower.
		$path = $this->binary('amd64', 0644);
		$output = $this->runStep('x86_64');
		$this->assertSame(0755, $this->mode($path));
		$this->assertSame([], $output->of('warning'));
	}

	public function testOtherArchitectureMissingIsFine(): void {
		$path = $this->binary('amd64', 0644);
		$output = $this->runStep('x86_64');
		$this->assertSame(0755, $this->mode($path));
		$this->assertSame([], $output->of('warning'));
		$this->assertCount(1, $output->of('info'));
	}

	public function testAlreadyExecutableIsLeftAlone(): void {
		$path = $this->binary('amd64', 0755);
		$before = filemtime($path);
		$output = $this->runStep('x86_64');
		$this->assertSame(0755, $this->mode($path));
		$this->assertSame([], $output->of('warning'));
		$this->assertSame([$path . ' is executable.'], $output->of('info'));
		$this->assertSame($before, filemtime($path));
	}

	public function testUnsupportedMachineIsAWarningAndPresentBinariesAreStillFixed(): void {
		$amd64 = $this->binary('amd64', 0644);
		$output = $this->runStep('riscv64');
		$warnings = $output->of('warning');
		$this->assertCount(1, $warnings, implode("\n", $warnings));
		$this->assertStringContainsString('riscv64', $warnings[0]);
		$this->assertStringContainsString('no bundled Istota sidecar', $warnings[0]);
		$this->assertSame(0755, $this->mode($amd64));
	}

	public function testChmodFailureIsReportedNotThrown(): void {
		// chmod on a /proc/<pid> entry fails with EPERM for every user, root included; the
		// link stands for a binary the web server's user may not change.
		mkdir($this->root . '/bin/amd64', 0755, true);
		$path = $this->root . '/bin/amd64/istota';
		symlink('/proc/self/status', $path);
		$this->assertTrue(is_file($path), 'the test needs a file behind the link');

		$output = $this->runStep('x86_64');

		$warnings = $output->of('warning');
		$this->assertCount(1, $warnings);
		$this->assertStringContainsString('Could not make ' . $path . ' executable', $warnings[0]);
		$this->assertStringContainsString('Operation not permitted', $warnings[0]);
		$this->assertStringContainsString('chmod 0755', $warnings[0]);
		$this->assertSame(['Could not make the Istota sidecar binary executable'], $this->logger->messages('warning'));
	}

	public function testSomethingElseInPlaceOfTheBinaryIsAWarning(): void {
		mkdir($this->root . '/bin/amd64/istota', 0755, true);
		$output = $this->runStep('x86_64');
		$warnings = $output->of('warning');
		$this->assertCount(1, $warnings);
		$this->assertStringContainsString('not a regular file', $warnings[0]);
	}

	public function testNoAppRootMeansTheFolderTheAppRunsFrom(): void {
		$output = new RecordingOutput();
		(new RestoreSidecarPermissions($this->logger, '', 'x86_64'))->run($output);
		$this->assertStringContainsString(
			ISTOTA_REPO_ROOT . '/bin/amd64/istota',
			implode("\n", array_merge($output->of('warning'), $output->of('info'))),
		);
	}

	public static function architectures(): array {
		return [
			['x86_64', 'amd64'], ['AMD64', 'amd64'], ['aarch64', 'arm64'], ['arm64', 'arm64'],
			['armv7l', null], ['i686', null], ['riscv64', null], ['', null],
		];
	}

	/** @dataProvider architectures */
	public function testArchitectureOf(string $machine, ?string $want): void {
		$this->assertSame($want, RestoreSidecarPermissions::architectureOf($machine));
	}

	public function testIsARepairStepWithAName(): void {
		$step = new RestoreSidecarPermissions($this->logger);
		$this->assertInstanceOf(IRepairStep::class, $step);
		$this->assertNotSame('', $step->getName());
	}
}
