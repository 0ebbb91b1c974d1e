<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\App\AppPathNotFoundException;
use OCP\App\IAppManager;

final class TestAppManager implements IAppManager {
	/**
	 * @param array<string, string> $installed app id => version
	 * @param array<string, string> $paths app id => folder
	 */
	public function __construct(
		public array $installed = ['spreed' => '21.1.0'],
		public array $paths = [],
	) {
	}

	public function getAppPath(string $appId): string {
		if (!isset($this->paths[$appId])) {
			throw new AppPathNotFoundException('Could not find path for ' . $appId);
		}
		return $this->paths[$appId];
	}

	public function getAppVersion(string $appId, bool $useCache = true): string {
		return $this->installed[$appId] ?? '0';
	}

	public function isInstalled($appId) {
		return isset($this->installed[$appId]);
	}
}
