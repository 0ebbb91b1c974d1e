<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Settings;

use OCA\Istota\AppInfo\Application;
use OCP\IL10N;
use OCP\IURLGenerator;
use OCP\Settings\IIconSection;

/** AdminSection is the "Istota" entry in the navigation of the administration settings. */
class AdminSection implements IIconSection {
	public const ID = 'istota';

	public function __construct(
		private readonly IL10N $l10n,
		private readonly IURLGenerator $urls,
	) {
	}

	public function getID(): string {
		return self::ID;
	}

	public function getName(): string {
		return $this->l10n->t('Istota');
	}

	public function getPriority(): int {
		return 75;
	}

	public function getIcon(): string {
		return $this->urls->imagePath(Application::APP_ID, 'app-dark.svg');
	}
}
