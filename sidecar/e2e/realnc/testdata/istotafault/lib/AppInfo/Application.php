<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\IstotaFault\AppInfo;

use OCA\IstotaFault\Listener\FailingListener;
use OCP\AppFramework\App;
use OCP\AppFramework\Bootstrap\IBootContext;
use OCP\AppFramework\Bootstrap\IBootstrap;
use OCP\AppFramework\Bootstrap\IRegistrationContext;
use OCP\User\Events\BeforeUserCreatedEvent;
use OCP\User\Events\UserChangedEvent;
use OCP\User\Events\UserCreatedEvent;

/**
 * A test-only app: its listeners throw at the step named by the app config value
 * `istotafault fail_at`, the way a failing user backend, hook or Talk would, so the tests
 * can break `occ istota:setup` half way and prove that running it again recovers.
 */
class Application extends App implements IBootstrap {
	public function __construct() {
		parent::__construct('istotafault');
	}

	public function register(IRegistrationContext $context): void {
		// Run before everyone else's listeners, Talk's included.
		$context->registerEventListener(BeforeUserCreatedEvent::class, FailingListener::class, 1000);
		$context->registerEventListener(UserCreatedEvent::class, FailingListener::class, 1000);
		$context->registerEventListener(UserChangedEvent::class, FailingListener::class, 1000);
		$context->registerEventListener('OCA\Talk\Events\BotInstallEvent', FailingListener::class, 1000);
	}

	public function boot(IBootContext $context): void {
	}
}
