<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCA\Istota\AppInfo\Application;
use OCA\Istota\Exception\SidecarException;
use OCP\App\AppPathNotFoundException;
use OCP\App\IAppManager;

/**
 * InstallCommand is the next step for an admin whose sidecar is not running yet: the
 * `istota install` command of the binary this app ships for the server's architecture
 * (deploy/INSTALL.md). `occ istota:setup` prints it, and the admin section shows it.
 */
class InstallCommand {
	/** uname -m => the folder below bin/ (scripts/appstore.sh builds these two). */
	private const ARCHES = ['x86_64' => 'amd64', 'amd64' => 'amd64', 'aarch64' => 'arm64', 'arm64' => 'arm64'];

	public function __construct(
		private readonly IAppManager $appManager,
		private readonly SidecarClient $client,
		private readonly AppSettings $settings,
	) {
	}

	/** The command for this server, or '' when the app ships no binary for its machine. */
	public function command(): string {
		try {
			$appPath = $this->appManager->getAppPath(Application::APP_ID);
		} catch (AppPathNotFoundException) {
			return '';
		}
		return self::forMachine($appPath, php_uname('m'));
	}

	/** The command for the app in $appPath on a machine `uname -m` calls $machine. */
	public static function forMachine(string $appPath, string $machine): string {
		$arch = self::ARCHES[strtolower($machine)] ?? null;
		if ($arch === null || $appPath === '') {
			return '';
		}
		$binary = rtrim($appPath, '/') . '/bin/' . $arch . '/istota';
		// Paths are plain on every usual server; anything else is quoted for the shell.
		if (preg_match('#^[A-Za-z0-9_./+-]+$#', $binary) !== 1) {
			$binary = escapeshellarg($binary);
		}
		return 'sudo ' . $binary . ' install';
	}

	/**
	 * A note for an admin when the sidecar does not answer: where it was asked and the
	 * command that installs and starts it. null when it answers.
	 */
	public function noteWhenNotRunning(): ?string {
		try {
			$this->client->health(2.0);
			return null;
		} catch (SidecarException) {
		}
		$command = $this->command();
		$note = sprintf('The Istota service does not answer at %s yet.', $this->settings->sidecarUrl());
		if ($command === '') {
			return $note . ' Install it as deploy/INSTALL.md of the app describes.';
		}
		return $note . " Install and start it on this server with:\n  " . $command;
	}
}
