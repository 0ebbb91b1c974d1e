<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\App\IAppManager;

final class TestAppManager implements IAppManager {
	/** @param array<string, string> $installed app id => version */
	public function __construct(
		public array $installed = ['spreed' => '21.1.0'],
	) {
	}

	public function getAppVersion(string $appId, bool $useCache = true): string {
		return $this->installed[$appId] ?? '0';
	}

	public function isInstalled($appId) {
		return isset($this->installed[$appId]);
	}
}
