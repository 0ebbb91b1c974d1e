<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\AppInfo;

use OCA\Istota\Listener\BotInvokeListener;
use OCA\Istota\Listener\UserEligibilityListener;
use OCA\Istota\SetupCheck\SidecarSetupCheck;
use OCP\AppFramework\App;
use OCP\AppFramework\Bootstrap\IBootContext;
use OCP\AppFramework\Bootstrap\IBootstrap;
use OCP\AppFramework\Bootstrap\IRegistrationContext;
use OCP\Group\Events\UserAddedEvent;
use OCP\User\Events\UserCreatedEvent;

/**
 * Application wires the app into Nextcloud. Services are autowired by constructor type;
 * only the listeners (Talk's bot events; new users and group changes, which may make a
 * user eligible for their conversation with the bot) and the admin overview's setup check
 * need registering (routes are attributes on the controllers, settings pages are declared
 * in info.xml).
 */
class Application extends App implements IBootstrap {
	public const APP_ID = 'istota';

	/**
	 * Named as a string, not BotInvokeEvent::class, so that registering never needs Talk's
	 * classes: without Talk the event simply never fires.
	 */
	public const TALK_BOT_INVOKE_EVENT = 'OCA\Talk\Events\BotInvokeEvent';

	public function __construct(array $urlParams = []) {
		parent::__construct(self::APP_ID, $urlParams);
	}

	public function register(IRegistrationContext $context): void {
		$context->registerEventListener(self::TALK_BOT_INVOKE_EVENT, BotInvokeListener::class);
		$context->registerEventListener(UserCreatedEvent::class, UserEligibilityListener::class);
		$context->registerEventListener(UserAddedEvent::class, UserEligibilityListener::class);
		$context->registerSetupCheck(SidecarSetupCheck::class);
	}

	public function boot(IBootContext $context): void {
	}
}
