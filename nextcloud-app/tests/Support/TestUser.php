<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\IUser;

final class TestUser implements IUser {
	public function __construct(
		private readonly string $uid,
		private readonly string $displayName,
		private readonly ?string $email = null,
	) {
	}

	public function getUID() {
		return $this->uid;
	}

	public function getDisplayName() {
		return $this->displayName;
	}

	public function getEMailAddress() {
		return $this->email;
	}
}
