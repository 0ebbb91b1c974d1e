<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Migration;

use OCP\Migration\IOutput;
use OCP\Migration\IRepairStep;
use Psr\Log\LoggerInterface;

/**
 * RestoreSidecarPermissions gives the sidecar binaries shipped in bin/<arch>/ (istota and
 * its sandbox init istota-init) their run bit back (mode 0755). Installing or updating an app from the store unpacks it
 * without keeping file modes on some setups, and a sidecar that cannot be executed looks
 * like a sidecar that is down. It runs on install and after every update, reports what it
 * did or could not do, and never fails the upgrade.
 */
class RestoreSidecarPermissions implements IRepairStep {
	/** The binary's mode: everyone may run it, only the owner may change it. */
	public const MODE = 0755;

	/**
	 * The binaries of one architecture, and whether each must be there. The sidecar runs
	 * without istota-init (its own sandbox-init takes over, each task starts slower), so
	 * only a missing istota is worth a warning; a present istota-init is fixed all the same.
	 */
	private const BINARIES = ['istota' => true, 'istota-init' => false];

	/** uname -m spellings of the architectures we ship, by their folder name under bin/. */
	private const ARCHITECTURES = [
		'amd64' => ['x86_64', 'amd64'],
		'arm64' => ['aarch64', 'arm64'],
	];

	/**
	 * @param string $appRoot the app folder; '' for the folder this class was loaded from
	 * @param string $machine the machine type as uname -m reports it; '' for this host's
	 */
	public function __construct(
		private readonly LoggerInterface $logger,
		private readonly string $appRoot = '',
		private readonly string $machine = '',
	) {
	}

	public function getName(): string {
		return 'Make the Istota sidecar binaries executable';
	}

	public function run(IOutput $output): void {
		$root = $this->appRoot !== '' ? rtrim($this->appRoot, '/') : dirname(__DIR__, 2);
		$machine = $this->machine !== '' ? $this->machine : php_uname('m');
		$own = self::architectureOf($machine);

		if ($own === null) {
			$output->warning(sprintf(
				'This server\'s architecture (%s) has no bundled Istota sidecar; build it from source and point the systemd unit at it.',
				$machine,
			));
		}
		foreach (array_keys(self::ARCHITECTURES) as $arch) {
			foreach (self::BINARIES as $name => $required) {
				$path = $root . '/bin/' . $arch . '/' . $name;
				// The other architecture's binaries are fixed too when they are there (shared
				// app folders, moved disks), but only this machine's istota must be.
				try {
					$this->restore($path, $required && $arch === $own, $output);
				} catch (\Throwable $e) {
					// A repair step that throws stops the whole upgrade; this one only reports.
					$this->logger->error('Checking the Istota sidecar binary failed', ['path' => $path, 'exception' => $e]);
					$output->warning(sprintf('Could not check %s; see the Nextcloud log.', $path));
				}
			}
		}
	}

	/** The bin/ folder name for a uname -m machine type, or null when none is shipped. */
	public static function architectureOf(string $machine): ?string {
		$machine = strtolower(trim($machine));
		foreach (self::ARCHITECTURES as $arch => $names) {
			if (in_array($machine, $names, true)) {
				return $arch;
			}
		}
		return null;
	}

	private function restore(string $path, bool $required, IOutput $output): void {
		clearstatcache(true, $path);
		if (!file_exists($path) && !is_link($path)) {
			if ($required) {
				$output->warning(sprintf(
					'The Istota sidecar binary for this server is missing at %s; reinstall the app from the app store, or build it with `make appstore`.',
					$path,
				));
			}
			return;
		}
		if (!is_file($path)) {
			$output->warning(sprintf('%s should be the Istota sidecar binary but is not a regular file; reinstall the app.', $path));
			return;
		}
		$mode = fileperms($path) & 0777;
		if ($mode === self::MODE) {
			$output->info(sprintf('%s is executable.', $path));
			return;
		}

		// chmod() raises a PHP warning on failure; keep its text for the report instead.
		$error = '';
		set_error_handler(static function (int $errno, string $message) use (&$error): bool {
			$error = $message;
			return true;
		});
		try {
			$changed = chmod($path, self::MODE);
		} finally {
			restore_error_handler();
		}
		clearstatcache(true, $path);
		if (!$changed || (fileperms($path) & 0777) !== self::MODE) {
			$reason = $error !== '' ? preg_replace('/^chmod\(\):\s*/', '', $error) : 'the mode did not change';
			$this->logger->warning('Could not make the Istota sidecar binary executable', ['path' => $path, 'reason' => $reason]);
			$output->warning(sprintf(
				'Could not make %s executable (%s). Run as root: chmod 0755 %s',
				$path,
				$reason,
				escapeshellarg($path),
			));
			return;
		}
		$output->info(sprintf('Made %s executable (mode was %04o).', $path, $mode));
	}
}
