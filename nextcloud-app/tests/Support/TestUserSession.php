<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\IUser;
use OCP\IUserSession;

/** The logged-in user of a test request; null plays a request without a session. */
final class TestUserSession implements IUserSession {
	public function __construct(
		public ?IUser $user = null,
	) {
	}

	public function getUser() {
		return $this->user;
	}

	public function isLoggedIn() {
		return $this->user !== null;
	}
}
